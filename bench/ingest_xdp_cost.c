// What receiving UDP over a veth link costs, by a socket (`recvmmsg` after an
// epoll wait, UDP GRO on: frameloop's receiver) against an AF_XDP socket
// (copy mode: veth has no zero-copy; the XDP program libxdp attaches
// redirects the queue's packets into the socket's UMEM). Both copy every
// UDP payload into a 16 MiB ring (the copy into frame slots) and count
// datagrams. Prints the thread's CPU seconds and the whole machine's busy
// CPU seconds (/proc/stat: user, system, irq, softirq) per gigabit received,
// so work that AF_XDP moves from the thread into the kernel's receive path is
// counted too. The sender runs in another network namespace
// (bench/ingest_xdp_cost.sh sets the link up).
//
//   apt-get install libxdp-dev libbpf-dev
//   gcc -O2 -Wall -o /tmp/xdp_cost bench/ingest_xdp_cost.c -lxdp -lbpf  (bench/rx_probe.h beside it)
//   /tmp/xdp_cost socket|xdp|xdp-skb IFNAME ADDR PORT SECONDS
//
// The receiver stops SECONDS after its first datagram. Drops are reported:
// the socket's SO_RXQ_OVFL, or the AF_XDP socket's XDP_STATISTICS (rx
// ring full, fill ring empty, invalid descriptors).
#define _GNU_SOURCE
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/ip.h>
#include <net/if.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xdp/xsk.h>

#include "rx_probe.h"

#ifndef SOL_XDP
#define SOL_XDP 283
#endif
// Multi-buffer sockets (Linux 6.6); older headers lack them.
#ifndef XDP_USE_SG
#define XDP_USE_SG (1 << 4)
#endif
#ifndef XDP_PKT_CONTD
#define XDP_PKT_CONTD (1 << 0)
#endif

#define FRAMES 4096
#define FRAME_BYTES XSK_UMEM__DEFAULT_FRAME_SIZE
#define RX_BATCH 64

static uint64_t not_ours;

// Busy CPU seconds of the whole machine (user, nice, system, irq, softirq).
static double machine_busy_s(void) {
  FILE *f = fopen("/proc/stat", "r");
  unsigned long long v[8] = {0};
  if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]) != 8) {
    fprintf(stderr, "cannot read /proc/stat\n");
    exit(1);
  }
  fclose(f);
  return (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / sysconf(_SC_CLK_TCK);
}

// The measured window: from the first batch on.
static double t0, c0, m0;

static void rx_started(void) {
  if (t0 == 0) t0 = now_s(), c0 = thread_cpu_s(), m0 = machine_busy_s();
}

// Where the UDP payload of an Ethernet frame of `total` bytes starts (its
// headers within the first `first` bytes) and how long it is, if the frame
// is IPv4 UDP to addr:port; 0 otherwise.
static size_t udp_payload_at(const char *frame, size_t first, size_t total, struct in_addr addr, int port,
                             size_t *len) {
  if (first < sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct udphdr)) return 0;
  const struct ethhdr *eth = (const struct ethhdr *)frame;
  if (eth->h_proto != htons(ETH_P_IP)) return 0;
  const struct iphdr *ip = (const struct iphdr *)(eth + 1);
  const size_t ihl = (size_t)ip->ihl * 4;
  if (ip->protocol != IPPROTO_UDP || ihl < sizeof *ip || ip->daddr != addr.s_addr) return 0;
  const size_t at = sizeof *eth + ihl + sizeof(struct udphdr);
  if (at > first) return 0;
  const struct udphdr *udp = (const struct udphdr *)((const char *)ip + ihl);
  const size_t udp_len = ntohs(udp->len);
  if (udp->dest != htons(port) || udp_len < sizeof *udp || sizeof *eth + ihl + udp_len > total) return 0;
  *len = udp_len - sizeof *udp;
  return at;
}

// The fragments of one packet (multi-buffer AF_XDP: a datagram larger than
// a UMEM frame comes in several descriptors, all but the last flagged).
#define MAX_FRAGMENTS 8
struct packet {
  const char *data[MAX_FRAGMENTS];
  size_t len[MAX_FRAGMENTS];
  int count, overflow;
};

// Copies the packet's UDP payload into the ring, fragment by fragment.
static void take_packet(struct packet *pk, struct in_addr addr, int port) {
  size_t total = 0, len;
  for (int f = 0; f < pk->count; f++) total += pk->len[f];
  const size_t at = pk->overflow ? 0 : udp_payload_at(pk->data[0], pk->len[0], total, addr, port, &len);
  if (at == 0) {
    not_ours++;
  } else if (pk->count == 1) {
    take(pk->data[0] + at, len, 0);
  } else {
    // One datagram, copied into its place in the ring fragment by fragment.
    char *dst = ring_reserve(len);
    size_t skip = at, done = 0;
    for (int f = 0; f < pk->count && done < len; f++) {
      const size_t n = pk->len[f] > skip ? pk->len[f] - skip : 0;
      const size_t piece = n < len - done ? n : len - done;
      if (piece) copy_into_ring(dst + done, pk->data[f] + skip, piece);
      done += piece;
      skip = skip > pk->len[f] ? skip - pk->len[f] : 0;
    }
    datagrams++;
  }
  pk->count = 0, pk->overflow = 0;
}

static void run_xdp(const char *ifname, int skb_mode, struct in_addr addr, int port, double seconds,
                    struct xdp_statistics *stats) {
  void *area = mmap(NULL, (size_t)FRAMES * FRAME_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  struct xsk_ring_prod fill;
  struct xsk_ring_cons comp, rx;
  struct xsk_umem *umem;
  struct xsk_umem_config ucfg = {.fill_size = FRAMES,
                                 .comp_size = XSK_RING_CONS__DEFAULT_NUM_DESCS,
                                 .frame_size = FRAME_BYTES,
                                 .frame_headroom = 0};
  int err = xsk_umem__create(&umem, area, (uint64_t)FRAMES * FRAME_BYTES, &fill, &comp, &ucfg);
  if (err) {
    fprintf(stderr, "xsk_umem__create: %s\n", strerror(-err));
    exit(1);
  }
  struct xsk_socket *xsk;
  struct xsk_socket_config scfg = {.rx_size = FRAMES,
                                   .tx_size = XSK_RING_PROD__DEFAULT_NUM_DESCS,
                                   .xdp_flags = skb_mode ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE,
                                   .bind_flags = XDP_COPY};
  // Multi-buffer where the kernel has it (datagrams larger than a frame), else one frame a packet.
  scfg.bind_flags = XDP_COPY | XDP_USE_SG;
  err = xsk_socket__create(&xsk, ifname, 0, umem, &rx, NULL, &scfg);
  if (err == -EINVAL || err == -EOPNOTSUPP) {
    scfg.bind_flags = XDP_COPY;
    err = xsk_socket__create(&xsk, ifname, 0, umem, &rx, NULL, &scfg);
  }
  fprintf(stderr, "AF_XDP socket on %s queue 0, %s attach, %s\n", ifname, skb_mode ? "generic" : "driver",
          scfg.bind_flags & XDP_USE_SG ? "multi-buffer" : "one frame a packet");
  if (err) {
    fprintf(stderr, "xsk_socket__create on %s queue 0: %s\n", ifname, strerror(-err));
    exit(1);
  }
  uint32_t idx;
  if (xsk_ring_prod__reserve(&fill, FRAMES, &idx) != FRAMES) {
    fprintf(stderr, "cannot fill the fill ring\n");
    exit(1);
  }
  for (uint32_t i = 0; i < FRAMES; i++) *xsk_ring_prod__fill_addr(&fill, idx + i) = (uint64_t)i * FRAME_BYTES;
  xsk_ring_prod__submit(&fill, FRAMES);
  struct pollfd pfd = {.fd = xsk_socket__fd(xsk), .events = POLLIN};
  struct packet pk = {0};
  for (;;) {
    if (t0 > 0 && now_s() - t0 >= seconds) break;
    uint32_t at;
    const uint32_t n = xsk_ring_cons__peek(&rx, RX_BATCH, &at);
    if (n == 0) {
      poll(&pfd, 1, 100);
      continue;
    }
    rx_started();
    uint32_t fidx;
    while (xsk_ring_prod__reserve(&fill, n, &fidx) != n) {
    }
    for (uint32_t i = 0; i < n; i++) {
      const struct xdp_desc *d = xsk_ring_cons__rx_desc(&rx, at + i);
      if (pk.count < MAX_FRAGMENTS) {
        pk.data[pk.count] = xsk_umem__get_data(area, d->addr);
        pk.len[pk.count++] = d->len;
      } else {
        pk.overflow = 1;
      }
      // Every frame goes back to the fill ring at the end of this batch, also
      // those of a packet that goes on in the next one: the kernel fills
      // frames in ring order, so it reuses them only after the other
      // FRAMES - 1, long after the copy.
      if (!(d->options & XDP_PKT_CONTD)) take_packet(&pk, addr, port);
      *xsk_ring_prod__fill_addr(&fill, fidx + i) = xsk_umem__extract_addr(d->addr);
    }
    xsk_ring_prod__submit(&fill, n);
    xsk_ring_cons__release(&rx, n);
  }
  socklen_t optlen = sizeof *stats;
  if (getsockopt(xsk_socket__fd(xsk), SOL_XDP, XDP_STATISTICS, stats, &optlen) != 0) perror("XDP_STATISTICS");
  xsk_socket__delete(xsk);
  xsk_umem__delete(umem);
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s socket|xdp|xdp-skb IFNAME ADDR PORT SECONDS\n", argv[0]);
    return 2;
  }
  struct in_addr addr;
  if (inet_pton(AF_INET, argv[3], &addr) != 1) {
    fprintf(stderr, "ADDR: %s is not an IPv4 address\n", argv[3]);
    return 2;
  }
  alloc_ring();
  const int port = atoi(argv[4]);
  const double seconds = atof(argv[5]);
  struct xdp_statistics stats = {0};
  const int xdp = strncmp(argv[1], "xdp", 3) == 0;
  if (xdp)
    run_xdp(argv[2], strcmp(argv[1], "xdp-skb") == 0, addr, port, seconds, &stats);
  else
    run_recvmmsg(open_socket(addr, port), seconds, &t0);
  const double cpu = thread_cpu_s() - c0, busy = machine_busy_s() - m0, wall = now_s() - t0;
  const double gbit = bytes * 8 / 1e9;
  if (xdp) drops = stats.rx_dropped + stats.rx_ring_full + stats.rx_fill_ring_empty_descs + stats.rx_invalid_descs;
  printf("mode=%s gbps=%.2f datagrams=%llu drops=%llu not_ours=%llu thread_cpu_s_per_gbit=%.4f "
         "machine_busy_s_per_gbit=%.4f ns_per_datagram=%.0f\n",
         argv[1], gbit / wall, (unsigned long long)datagrams, (unsigned long long)drops,
         (unsigned long long)not_ours, cpu / gbit, busy / gbit, cpu * 1e9 / (datagrams ? datagrams : 1));
  return 0;
}
