#!/usr/bin/env python3
"""One rank program for scripts/netns-cluster -k 2: rank 0 waits until the link has been idle (a tbf bucket is
full), then sends BYTES over TCP to rank 1, which prints how long the bytes after the first read took to
arrive, in ms: "received N bytes, M after the first read, in T ms".

usage: link_rate_check.py BYTES
"""
import os
import socket
import sys
import time

total = int(sys.argv[1])
rank = int(os.environ["RANK"])
port = 29917
if rank == 1:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((os.environ["HOST_ADDR"], port))
    srv.listen(1)
    srv.settimeout(30)
    conn, _ = srv.accept()
    got, first, after = 0, None, 0
    while got < total:
        data = conn.recv(1 << 20)
        if not data:
            break
        got += len(data)
        if first is None:
            first = time.monotonic()
        else:
            after += len(data)
    print(f"received {got} bytes, {after} after the first read, in {(time.monotonic() - first) * 1e3:.2f} ms")
    sys.exit(0 if got == total else 1)
else:
    for attempt in range(100):
        try:
            s = socket.create_connection(("10.77.0.2", port), timeout=10)
            break
        except OSError:
            time.sleep(0.05)
    else:
        sys.exit("link_rate_check: cannot connect to rank 1")
    time.sleep(0.3)  # the link idles: tbf's bucket fills
    s.sendall(b"x" * total)
    s.close()
