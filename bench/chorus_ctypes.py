"""libchorus from Python through ctypes, for the benchmarks that call it without torch (bench/ctypes_allreduce.py,
bench/torch_bound.py): the library with chorusAllReduce's signature, and a communicator from chorusrun's
environment."""
import ctypes
import os

CHORUS_FLOAT32, CHORUS_SUM = 7, 0  # chorusFloat32, chorusSum (include/chorus/chorus.h)


def open_comm(path):
    """(lib, comm, rank, nranks): libchorus at `path` and a communicator made by chorusCommInitFromEnv."""
    lib = ctypes.CDLL(path)
    lib.chorusAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_void_p, ctypes.c_void_p]
    comm = ctypes.c_void_p()
    if lib.chorusCommInitFromEnv(ctypes.byref(comm)) != 0:
        raise SystemExit("chorusCommInitFromEnv failed: run under chorusrun")
    return lib, comm, int(os.environ["CHORUS_RANK"]), int(os.environ["CHORUS_NRANKS"])
