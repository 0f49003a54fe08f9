/* nfq_delay: the receiving end of a simulated link (this kernel has no netem). scripts/netns-cluster runs one
 * per simulated host behind
 *     iptables -A INPUT -i eth0 -j NFQUEUE --queue-num Q --queue-bypass
 * and this program holds each packet's verdict, in arrival order (a FIFO, so packets are never reordered), until
 * the link would have delivered it, then accepts it (all packets that are due with one batch verdict).
 *
 * With a RATE the link also serialises: a packet occupies the host's downlink for its wire size / RATE after the
 * previous one left it, and is delivered DELAY_US after that. The sender's tbf alone cannot do this: its bucket
 * must hold a whole 64 KiB GSO packet (a smaller one splits the packets and the simulator becomes CPU-bound), and
 * a full bucket lets a message of that size out at once, so mid-sized messages would travel at veth speed.
 * GSO packets are taken whole (NFQA_CFG_F_GSO): their wire size is counted from the IPv4 header as the segments
 * they stand for. The queue fails open when full, so the delayer never drops a packet.
 *
 * usage: nfq_delay QUEUE_NUM DELAY_US [RATE]     RATE in tc's syntax: 1gbit, 100mbit, 500kbit, 2000000bit
 */
#define _GNU_SOURCE /* ppoll, clock_gettime under -std=c11 */
#include <arpa/inet.h> /* before libnetfilter_queue, which needs its types */
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <strings.h>
#include <time.h>

enum { kMaxHeld = 1 << 16 };

static struct {
  uint32_t id[kMaxHeld];
  uint64_t due[kMaxHeld];
  size_t head, count;
} held;

static uint64_t delayNs;
static double nsPerByte;    /* serialisation at RATE; 0 without one */
static uint64_t linkFreeNs; /* when the downlink has sent the last packet accepted into the FIFO */
static uint64_t lateNs; /* how late this process wakes up, learnt below */
static volatile sig_atomic_t stop;
static uint64_t packets, stamped, releases, lateSumNs; /* reported at exit */

static uint64_t nowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Bytes the packet takes on the wire: Ethernet header per segment, and for a GSO packet the IP and TCP headers
 * repeated in every MTU-sized segment (1500 bytes, the veths' MTU). */
static double wireBytes(const unsigned char* ip, int copied) {
  if (copied < 20 || (ip[0] >> 4) != 4) return copied > 0 ? copied + 14.0 : 64.0;
  int total = (ip[2] << 8) | ip[3], ihl = (ip[0] & 15) * 4, hdr = ihl;
  if (ip[9] == 6 && copied >= ihl + 13) hdr += (ip[ihl + 12] >> 4) * 4; /* TCP data offset */
  int payload = total - hdr, perSegment = 1500 - hdr;
  int segments = payload > perSegment && perSegment > 0 ? (payload + perSegment - 1) / perSegment : 1;
  return payload + segments * (hdr + 14.0);
}

/* When the packet reached the host: the kernel's receive timestamp (wall clock, enabled in main), so a delayer
 * that was asleep when it came does not add its own wake-up time; without one, now less the learnt lateness. */
static uint64_t arrivalNs(struct nfq_data* nfa) {
  uint64_t now = nowNs();
  struct timeval tv;
  struct timespec real;
  if (nfq_get_timestamp(nfa, &tv) == 0 && clock_gettime(CLOCK_REALTIME, &real) == 0) {
    int64_t age = ((int64_t)real.tv_sec - tv.tv_sec) * 1000000000 + ((int64_t)real.tv_nsec - tv.tv_usec * 1000);
    if (age >= 0 && age < 1000000000) {
      stamped++;
      return now - (uint64_t)age;
    }
  }
  return now - (lateNs < delayNs ? lateNs : delayNs);
}

static int onPacket(struct nfq_q_handle* qh, struct nfgenmsg* msg, struct nfq_data* nfa, void* data) {
  (void)msg, (void)data;
  struct nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph == NULL) return 0;
  uint32_t id = ntohl(ph->packet_id);
  if (held.count == kMaxHeld) return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL); /* full: pass at once */
  size_t tail = (held.head + held.count) % kMaxHeld;
  held.id[tail] = id;
  packets++;
  uint64_t arrived = arrivalNs(nfa);
  uint64_t sent = arrived;
  if (nsPerByte > 0) {
    unsigned char* ip = NULL;
    int copied = nfq_get_payload(nfa, &ip);
    if (linkFreeNs > sent) sent = linkFreeNs;
    sent += (uint64_t)(wireBytes(ip, copied) * nsPerByte);
    linkFreeNs = sent;
  }
  held.due[tail] = sent + delayNs;
  held.count++;
  return 0;
}

static void onSignal(int sig) {
  (void)sig;
  stop = 1;
}

/* tc's rate syntax: a number and bit, kbit, mbit, gbit or tbit (powers of 1000), or bps, kbps, mbps, gbps
 * (bytes). Returns bits per second, 0 when it cannot be read. */
static double parseRate(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (end == s || v <= 0) return 0;
  static const struct { const char* unit; double bits; } units[] = {
      {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12},
      {"bps", 8}, {"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}, {"", 1}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcasecmp(end, units[i].unit) == 0) return v * units[i].bits;
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: nfq_delay QUEUE_NUM DELAY_US [RATE]\n");
    return 2;
  }
  int queue = atoi(argv[1]);
  delayNs = (uint64_t)strtoull(argv[2], NULL, 10) * 1000u;
  if (argc == 4) {
    double bits = parseRate(argv[3]);
    if (bits <= 0) {
      fprintf(stderr, "nfq_delay: RATE '%s': expected a number and bit/kbit/mbit/gbit/tbit or bps/kbps/mbps/gbps\n",
              argv[3]);
      return 2;
    }
    nsPerByte = 8e9 / bits;
  }
  prctl(PR_SET_TIMERSLACK, 1UL); /* release packets when due, not up to 50 us later */
  signal(SIGTERM, onSignal);
  signal(SIGINT, onSignal);

  struct nfq_handle* h = nfq_open();
  if (h == NULL) {
    perror("nfq_delay: nfq_open");
    return 1;
  }
  struct nfq_q_handle* qh = nfq_create_queue(h, (uint16_t)queue, onPacket, NULL);
  if (qh == NULL) {
    perror("nfq_delay: nfq_create_queue");
    return 1;
  }
  /* Without a rate only the verdict matters; with one, the IPv4 and TCP headers give the packet's size. */
  if (nfq_set_mode(qh, nsPerByte > 0 ? NFQNL_COPY_PACKET : NFQNL_COPY_META, nsPerByte > 0 ? 80 : 0) < 0)
    perror("nfq_delay: nfq_set_mode");
  nfq_set_queue_maxlen(qh, kMaxHeld);
  uint32_t flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
  if (nfq_set_queue_flags(qh, flags, flags) < 0) perror("nfq_delay: nfq_set_queue_flags");
  nfnl_rcvbufsiz(nfq_nfnlh(h), 16u << 20);
  int fd = nfq_fd(h);
  /* The kernel stamps received packets only while some socket asks for timestamps. */
  int stampSock = socket(AF_INET, SOCK_DGRAM, 0), on = 1;
  if (stampSock < 0 || setsockopt(stampSock, SOL_SOCKET, SO_TIMESTAMP, &on, sizeof on) < 0)
    perror("nfq_delay: SO_TIMESTAMP (arrival times fall back to the learnt lateness)");
  char buf[65536] __attribute__((aligned));
  fprintf(stderr, "nfq_delay: queue %d, delay %llu us, %s%s\n", queue, (unsigned long long)(delayNs / 1000),
          argc == 4 ? "serialising at " : "no rate", argc == 4 ? argv[3] : "");

  /* Waking up here comes 100-150 us late (a VM), which would add that much to every hop twice (when a packet
   * is queued and when it is due): the delayer learns how late its timer wakes it (a moving average), sets the
   * timer that much earlier and counts a packet's arrival that much earlier too. */
  while (!stop) {
    /* Release every packet that is due, then sleep until the next one is due or a packet arrives. */
    uint64_t now = nowNs();
    if (held.count > 0 && held.due[held.head] <= now + lateNs) {
      int64_t late = (int64_t)(now + lateNs) - (int64_t)held.due[held.head];
      if (late < 2000000) lateNs = (uint64_t)(((int64_t)lateNs * 7 + late) / 8);
    }
    /* Packet ids grow in arrival order, so one batch verdict accepts every due packet at once. */
    int due = 0;
    uint32_t last = 0;
    uint64_t dueNs = held.count > 0 ? held.due[held.head] : 0;
    while (held.count > 0 && held.due[held.head] <= now + lateNs) {
      last = held.id[held.head];
      due = 1;
      held.head = (held.head + 1) % kMaxHeld;
      held.count--;
    }
    if (due) {
      nfq_set_verdict_batch(qh, last, NF_ACCEPT);
      releases++;
      lateSumNs += now > dueNs ? now - dueNs : 0;
    }
    int timeoutMs = -1;
    struct timespec wait = {0, 0};
    if (held.count > 0) {
      uint64_t left = held.due[held.head] - now - lateNs;
      wait.tv_sec = (time_t)(left / 1000000000u);
      wait.tv_nsec = (long)(left % 1000000000u);
      timeoutMs = 0;
    }
    struct pollfd p = {fd, POLLIN, 0};
    int ready = timeoutMs < 0 ? poll(&p, 1, 1000) : ppoll(&p, 1, &wait, NULL);
    if (ready < 0 && errno != EINTR) {
      perror("nfq_delay: poll");
      break;
    }
    if (ready > 0) {
      for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0) {
          if (errno == ENOBUFS) continue; /* the kernel dropped notifications: fail-open covers them */
          break;
        }
        nfq_handle_packet(h, buf, (int)n);
      }
    }
  }
  /* Let whatever is still held go. */
  if (held.count > 0) nfq_set_verdict_batch(qh, held.id[(held.head + held.count - 1) % kMaxHeld], NF_ACCEPT);
  fprintf(stderr, "nfq_delay: %llu packets (%llu with a receive timestamp), released %llu times, on average %.1f us late\n",
          (unsigned long long)packets, (unsigned long long)stamped, (unsigned long long)releases,
          releases ? lateSumNs / 1e3 / releases : 0.0);
  nfq_destroy_queue(qh);
  nfq_close(h);
  return 0;
}
