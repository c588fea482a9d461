// What the receive-cost probes (bench/ingest_rx_cost.c, bench/ingest_xdp_cost.c)
// share: the copy of every received batch into a 16 MiB ring (the copy a
// receiver makes into its frame slots), the counts, the clocks, and
// frameloop's way of reading a UDP socket: `recvmmsg` of BATCH GRO buffers
// after an epoll wait. A program including it defines `rx_started()`,
// called before the first batch is counted.
#ifndef FRAMELOOP_RX_PROBE_H
#define FRAMELOOP_RX_PROBE_H
#include <arpa/inet.h>
#include <emmintrin.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#define BATCH 16
#define BUF_BYTES 65536
#define RING_BYTES (16u << 20)
#define CTRL_BYTES 64

static char *slots;
static size_t slot_at;
static uint64_t bytes, datagrams, drops;

static void rx_started(void);

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static double thread_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void alloc_ring(void) {
  slots = aligned_alloc(4096, RING_BYTES);
  memset(slots, 0, RING_BYTES);
}

// RX_COPY=nt in the environment: the copy into the ring by non-temporal
// stores (then a store fence), not memcpy.
static int copy_nt = -1;

static void copy_into_ring(char *dst, const char *src, size_t len) {
  if (copy_nt < 0) copy_nt = getenv("RX_COPY") && strcmp(getenv("RX_COPY"), "nt") == 0;
  if (!copy_nt) {
    memcpy(dst, src, len);
    return;
  }
  size_t k = 0;
  for (; k + 16 <= len; k += 16) _mm_stream_si128((__m128i *)(dst + k), _mm_loadu_si128((const __m128i *)(src + k)));
  memcpy(dst + k, src + k, len - k);
  _mm_sfence();
}

// Room for `len` received bytes in the ring (from its start again when
// they do not fit before its end), counted.
static char *ring_reserve(size_t len) {
  if (slot_at + len > RING_BYTES) slot_at = 0;
  char *at = slots + slot_at;
  slot_at += (len + 63) & ~(size_t)63;
  bytes += len;
  return at;
}

// The copy into the frame ring, and the counts (GRO buffers by their segment size).
static void take(const char *data, size_t len, int segment) {
  copy_into_ring(ring_reserve(len), data, len);
  datagrams += segment > 0 ? (len + segment - 1) / segment : 1;
}

// The GRO segment size and the kernel's drop count from a message's control data.
static void read_cmsgs(struct msghdr *m, struct cmsghdr *first, int *segment) {
  for (struct cmsghdr *c = first; c; c = CMSG_NXTHDR(m, c)) {
    if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) memcpy(segment, CMSG_DATA(c), sizeof(int));
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
      uint32_t d;
      memcpy(&d, CMSG_DATA(c), 4);
      drops = d;
    }
  }
}

// A UDP socket bound to addr:port with GRO, drop counts and a 4 MiB buffer.
static int open_socket(struct in_addr addr, int port) {
  int s = socket(AF_INET, SOCK_DGRAM, 0), one = 1, rcvbuf = 4 << 20;
  setsockopt(s, IPPROTO_UDP, UDP_GRO, &one, sizeof one);
  setsockopt(s, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one);
  setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr = addr};
  if (bind(s, (struct sockaddr *)&a, sizeof a) != 0) {
    perror("bind");
    exit(1);
  }
  return s;
}

// Receives until `seconds` after the first batch (`*t0`, set by rx_started's caller).
static void run_recvmmsg(int s, double seconds, const double *t0) {
  static char bufs[BATCH][BUF_BYTES];
  static char ctrl[BATCH][CTRL_BYTES];
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN};
  epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
  for (;;) {
    if (*t0 > 0 && now_s() - *t0 >= seconds) return;
    if (epoll_wait(ep, &ev, 1, 100) <= 0) continue;
    for (;;) {
      for (int i = 0; i < BATCH; i++) {
        iov[i] = (struct iovec){bufs[i], BUF_BYTES};
        memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_control = ctrl[i];
        msgs[i].msg_hdr.msg_controllen = CTRL_BYTES;
      }
      int n = recvmmsg(s, msgs, BATCH, MSG_DONTWAIT, NULL);
      if (n <= 0) break;
      rx_started();
      for (int i = 0; i < n; i++) {
        int segment = 0;
        read_cmsgs(&msgs[i].msg_hdr, CMSG_FIRSTHDR(&msgs[i].msg_hdr), &segment);
        take(bufs[i], msgs[i].msg_len, segment);
      }
    }
  }
}
#endif
