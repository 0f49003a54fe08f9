/* nfq_delay: adds a fixed one-way delay to the packets netfilter queues to it (this kernel has no netem).
 * scripts/netns-cluster runs one per simulated host with
 *     iptables -A OUTPUT -o eth0 -j NFQUEUE --queue-num Q --queue-bypass
 * and this program holds each packet's verdict for the delay, in arrival order (a FIFO, so packets are never
 * reordered), then accepts it (all packets that are due with one batch verdict). GSO packets are taken whole (NFQA_CFG_F_GSO) and the queue fails open when full,
 * so the delayer never drops or slows a packet beyond the delay.
 *
 * usage: nfq_delay QUEUE_NUM DELAY_US
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
#include <time.h>

enum { kMaxHeld = 1 << 16 };

static struct {
  uint32_t id[kMaxHeld];
  uint64_t due[kMaxHeld];
  size_t head, count;
} held;

static uint64_t delayNs;
static uint64_t lateNs; /* how late this process wakes up, learnt below */
static volatile sig_atomic_t stop;

static uint64_t nowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int onPacket(struct nfq_q_handle* qh, struct nfgenmsg* msg, struct nfq_data* nfa, void* data) {
  (void)msg, (void)data;
  struct nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph == NULL) return 0;
  uint32_t id = ntohl(ph->packet_id);
  if (held.count == kMaxHeld) return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL); /* full: pass at once */
  size_t tail = (held.head + held.count) % kMaxHeld;
  held.id[tail] = id;
  uint64_t now = nowNs();
  held.due[tail] = now + delayNs - (lateNs < delayNs ? lateNs : delayNs);
  held.count++;
  return 0;
}

static void onSignal(int sig) {
  (void)sig;
  stop = 1;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: nfq_delay QUEUE_NUM DELAY_US\n");
    return 2;
  }
  int queue = atoi(argv[1]);
  delayNs = (uint64_t)strtoull(argv[2], NULL, 10) * 1000u;
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
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) perror("nfq_delay: nfq_set_mode");
  nfq_set_queue_maxlen(qh, kMaxHeld);
  uint32_t flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
  if (nfq_set_queue_flags(qh, flags, flags) < 0) perror("nfq_delay: nfq_set_queue_flags");
  nfnl_rcvbufsiz(nfq_nfnlh(h), 16u << 20);
  int fd = nfq_fd(h);
  char buf[65536] __attribute__((aligned));
  fprintf(stderr, "nfq_delay: queue %d, delay %llu us\n", queue, (unsigned long long)(delayNs / 1000));

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
    while (held.count > 0 && held.due[held.head] <= now + lateNs) {
      last = held.id[held.head];
      due = 1;
      held.head = (held.head + 1) % kMaxHeld;
      held.count--;
    }
    if (due) nfq_set_verdict_batch(qh, last, NF_ACCEPT);
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
  nfq_destroy_queue(qh);
  nfq_close(h);
  return 0;
}
