#!/bin/bash
# Receive cost over a veth link: a UDP socket (recvmmsg + epoll, GRO on) against
# an AF_XDP socket in copy mode, driver (veth's native XDP) and generic (skb)
# attach, on the same traffic from `frameloop send` in another network
# namespace, alternating, at several rates (bench/ingest_xdp_cost.c). Writes one
# line per trial to $OUT/trials.txt. Needs root, libxdp-dev and libbpf-dev.
# CASES (say "1472 2 1472 4": size and Gb/s pairs) replaces the default rates;
# MODES the default "socket xdp xdp-skb"; SEND_EXTRA is passed to the sender
# (say "--gso off"); VETH_GRO=on turns on GRO on the receiving veth (as a NIC
# driver does: per-datagram traffic then reaches the socket coalesced). The
# link's MTU is raised to fit the largest datagram. AF_XDP frames are 4 KiB
# UMEM chunks: a larger datagram needs a multi-buffer socket (Linux 6.6) and,
# libxdp's default program not taking fragments, generic attach (`xdp-skb`)
# and a sender that does not use GSO (SEND_EXTRA="--gso off").
#
#   apt-get install libxdp-dev libbpf-dev
#   OUT=/tmp/xdp-cost FRAMELOOP=target/release/frameloop bench/ingest_xdp_cost.sh
set -u
B=${FRAMELOOP:-target/release/frameloop}
OUT=${OUT:-/tmp/xdp-cost}
ROUNDS=${ROUNDS:-2}
NS=flxs RX_IF=flx0 TX_IF=flx1 RX_IP=10.77.0.1 TX_IP=10.77.0.2 PORT=5811
mkdir -p "$OUT"
RX=${XDP_COST:-$OUT/xdp_cost}
[ -n "${XDP_COST:-}" ] || gcc -O2 -Wall -o "$RX" "$(dirname "$0")/ingest_xdp_cost.c" -lxdp -lbpf || exit 1
read -r -a PAIRS <<< "${CASES:-1472 1 1472 2 1472 3}"
cleanup() { ip link del "$RX_IF" 2>/dev/null; ip netns del "$NS" 2>/dev/null; }
trap cleanup EXIT
cleanup
ip netns add "$NS" || exit 1
ip link add "$RX_IF" type veth peer name "$TX_IF" netns "$NS" || exit 1
# The link's MTU fits the largest datagram (at least 1,500).
largest=1472
for ((k = 0; k < ${#PAIRS[@]}; k += 2)); do [ "${PAIRS[k]}" -gt $largest ] && largest=${PAIRS[k]}; done
ip link set "$RX_IF" mtu $((largest + 28)) && ip -n "$NS" link set "$TX_IF" mtu $((largest + 28))
ip addr add "$RX_IP/24" dev "$RX_IF" && ip link set "$RX_IF" up
[ "${VETH_GRO:-off}" = on ] && { ethtool -K "$RX_IF" gro on || exit 1; }
ip -n "$NS" addr add "$TX_IP/24" dev "$TX_IF" && ip -n "$NS" link set "$TX_IF" up && ip -n "$NS" link set lo up
# The AF_XDP socket takes every packet of the queue, ARP replies included:
# the sender gets the receiver's address statically.
ip -n "$NS" neigh replace "$RX_IP" lladdr "$(cat /sys/class/net/$RX_IF/address)" dev "$TX_IF" nud permanent

read -r -a RUN_MODES <<< "${MODES:-socket xdp xdp-skb}"
: > "$OUT/trials.txt"
: > "$OUT/rx-stderr.txt"
for round in $(seq 1 "$ROUNDS"); do
  for ((k = 0; k < ${#PAIRS[@]}; k += 2)); do
    size=${PAIRS[k]} gbps=${PAIRS[k + 1]}
    rate=$(python3 -c "print(round($gbps * 1e9 / 8 / 65536, 3))")
    for mode in "${RUN_MODES[@]}"; do
      "$RX" "$mode" "$RX_IF" "$RX_IP" $PORT 3 > "$OUT/rx.txt" 2>> "$OUT/rx-stderr.txt" &
      pid=$!
      sleep 0.5
      # shellcheck disable=SC2086
      ip netns exec "$NS" "$B" send --to "$RX_IP:$PORT" --rate "$rate" --frame-bytes 65536 --packet-bytes "$size" \
        --duration 4 --pacing sleep ${SEND_EXTRA:-} > "$OUT/send.txt" 2>&1
      wait $pid
      echo "round=$round size=$size offered_gbps=$gbps send=\"${SEND_EXTRA:-}\" veth_gro=${VETH_GRO:-off} $(grep -h '^mode=' "$OUT/rx.txt")" |
        tee -a "$OUT/trials.txt"
    done
  done
done
