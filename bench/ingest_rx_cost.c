// What receiving UDP costs a thread, by two kernel interfaces, on the same
// traffic: `recvmmsg` after an epoll wait (what frameloop's receiver does)
// against an io_uring multishot `recvmsg` into a ring of provided buffers.
// Both take UDP GRO batches of up to 64 KiB (the socket has UDP_GRO on, as
// frameloop's does), both copy every batch into a 16 MiB ring (the copy a
// receiver makes into its frame slots), and both count datagrams by the
// GRO segment size. Prints the thread's CPU seconds per gigabit received.
//
//   apt-get install liburing-dev
//   gcc -O2 -o /tmp/rx_cost bench/ingest_rx_cost.c -luring
//   /tmp/rx_cost recvmmsg 5811 6 &
//   frameloop send --to 127.0.0.1:5811 --rate 7629 --frame-bytes 65536 --packet-bytes 8972 --duration 5
//   (then `uring` the same way; bench/ingest_rx_cost.sh runs both at several rates)
//   (RX_COPY=nt in the environment: the ring copy by non-temporal stores)
//
// The receiver stops SECONDS after its first datagram. Kernel drops
// (SO_RXQ_OVFL) are reported too: a run that dropped measured a receiver
// that could not keep up.
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <sys/resource.h>
#include <unistd.h>

#include "rx_probe.h"

#define URING_BUFS 64

static double t0, c0;

static void rx_started(void) {
  if (t0 == 0) t0 = now_s(), c0 = thread_cpu_s();
}

static void run_uring(int s, double seconds) {
  struct io_uring ring;
  if (io_uring_queue_init(64, &ring, 0) != 0) {
    fprintf(stderr, "io_uring_queue_init failed\n");
    exit(1);
  }
  struct io_uring_buf_ring *br = aligned_alloc(4096, URING_BUFS * sizeof(struct io_uring_buf));
  io_uring_buf_ring_init(br);
  struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)br, .ring_entries = URING_BUFS, .bgid = 0};
  int err = io_uring_register_buf_ring(&ring, &reg, 0);
  if (err != 0) {
    fprintf(stderr, "io_uring_register_buf_ring: %s\n", strerror(-err));
    exit(1);
  }
  // Each provided buffer: the io_uring_recvmsg_out header, the control bytes, then the payload.
  const size_t each = sizeof(struct io_uring_recvmsg_out) + CTRL_BYTES + BUF_BYTES;
  char *bufs = aligned_alloc(4096, each * URING_BUFS);
  for (int i = 0; i < URING_BUFS; i++)
    io_uring_buf_ring_add(br, bufs + i * each, each, i, io_uring_buf_ring_mask(URING_BUFS), i);
  io_uring_buf_ring_advance(br, URING_BUFS);
  struct msghdr want = {0};
  want.msg_controllen = CTRL_BYTES;
  int armed = 0;
  for (;;) {
    if (t0 > 0 && now_s() - t0 >= seconds) return;
    if (!armed) {
      struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
      io_uring_prep_recvmsg_multishot(sqe, s, &want, 0);
      sqe->flags |= IOSQE_BUFFER_SELECT;
      sqe->buf_group = 0;
      io_uring_submit(&ring);
      armed = 1;
    }
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = 100000000};
    if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts) != 0) continue;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      seen++;
      if (!(cqe->flags & IORING_CQE_F_MORE)) armed = 0;
      if (cqe->res < 0) {
        if (cqe->res != -ENOBUFS) fprintf(stderr, "recvmsg: %s\n", strerror(-cqe->res));
        continue;
      }
      rx_started();
      int id = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
      char *buf = bufs + (size_t)id * each;
      struct io_uring_recvmsg_out *o = io_uring_recvmsg_validate(buf, cqe->res, &want);
      if (o) {
        int segment = 0;
        struct msghdr m = want;
        m.msg_control = (char *)(o + 1);
        m.msg_controllen = o->controllen;
        read_cmsgs(&m, io_uring_recvmsg_cmsg_firsthdr(o, &want), &segment);
        take(io_uring_recvmsg_payload(o, &want), io_uring_recvmsg_payload_length(o, cqe->res, &want), segment);
      }
      io_uring_buf_ring_add(br, buf, each, id, io_uring_buf_ring_mask(URING_BUFS), 0);
      io_uring_buf_ring_advance(br, 1);
    }
    io_uring_cq_advance(&ring, seen);
  }
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s recvmmsg|uring PORT SECONDS\n", argv[0]);
    return 2;
  }
  alloc_ring();
  struct in_addr loopback = {.s_addr = htonl(INADDR_LOOPBACK)};
  int s = open_socket(loopback, atoi(argv[2]));
  double seconds = atof(argv[3]);
  if (strcmp(argv[1], "uring") == 0)
    run_uring(s, seconds);
  else
    run_recvmmsg(s, seconds, &t0);
  const double cpu = thread_cpu_s() - c0, wall = now_s() - t0, gbit = bytes * 8 / 1e9;
  printf("mode=%s gbps=%.2f datagrams=%llu kernel_drops=%llu cpu_s=%.3f cpu_s_per_gbit=%.4f ns_per_datagram=%.0f\n",
         argv[1], gbit / wall, (unsigned long long)datagrams, (unsigned long long)drops, cpu, cpu / gbit,
         cpu * 1e9 / (datagrams ? datagrams : 1));
  return 0;
}
