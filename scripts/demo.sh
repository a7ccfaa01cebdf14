#!/usr/bin/env bash
# demo.sh - the main job: an unmodified program (iperf, iperf2) carrying a
# stream between two addresses, over kernel TCP and under librsock, side by
# side, with the RDMA device's own packet counters and librsock's counters
# showing which path carried the bytes; raw verbs (ib_write_bw) as the
# transport's limit, and an unmodified file transfer (nc) checked by digest.
# Runs in the soft-RoCE guest (test/vm/vm-run) when this host has no RDMA
# device; on an RDMA host, set RSOCK_TEST_ADDR_A and RSOCK_TEST_ADDR_B.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ "${RSOCK_DEMO_INNER:-}" != 1 ]; then
	scripts/setup.sh
	if ! { [ -n "${RSOCK_TEST_ADDR_A:-}" ] && ls /sys/class/infiniband/ 2>/dev/null | grep -q .; }; then
		echo "demo: no RDMA device here: running in the soft-RoCE guest" >&2
		exec test/vm/vm-run env RSOCK_DEMO_INNER=1 scripts/demo.sh
	fi
fi

A=${RSOCK_TEST_ADDR_A:?} B=${RSOCK_TEST_ADDR_B:?}
lib=$top/build/.libs/librsock.so
secs=${RSOCK_DEMO_SECONDS:-5}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
rxe_pkts() { cat /sys/class/infiniband/*/ports/*/hw_counters/sent_pkts 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
dev_of() { # the RDMA device whose GID table holds IPv4 address $1
	local want gid hex
	# shellcheck disable=SC2086
	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${1//./ })
	for gid in /sys/class/infiniband/*/ports/*/gids/*; do
		read -r hex 2>/dev/null <"$gid" || continue
		[ "$hex" = "$want" ] && { gid=${gid%/ports/*}; echo "${gid##*/}"; return 0; }
	done
	return 1
}
wait_port() { for _ in $(seq 100); do ss -ltn | grep -q ":$1 " && return 0; sleep 0.1; done; return 1; }
row() { printf '| %-20s | %16s | %16s | %s\n' "$@"; }
stats_of() { # the program's own counters (not those of `timeout`, also preloaded)
	grep -ho 'streams tcp=[0-9]* rdma=[0-9]*' "$1" 2>/dev/null | grep -v 'tcp=0 rdma=0' | tail -1
}

run_iperf() { # label, preload(0|1) -> one table row
	local label=$1 pre=$2 env=(env) out before after port
	port=$((5201 + pre))
	[ "$pre" = 1 ] && env=(env LD_PRELOAD="$lib" RSOCK_STATS=1)
	"${env[@]}" RSOCK_LOG_FILE="$logs/srv-$pre.log" iperf -s -B "$B" -p "$port" >/dev/null 2>&1 &
	local srv=$!
	wait_port "$port"
	before=$(rxe_pkts)
	out=$("${env[@]}" RSOCK_LOG_FILE="$logs/cli-$pre.log" timeout $((secs + 30)) \
		iperf -c "$B" -B "$A" -p "$port" -t "$secs" -f m 2>&1 | awk '/Mbits\/sec/ {print $(NF-1), $NF}' | tail -1)
	after=$(rxe_pkts)
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
	row "$label" "${out:-failed}" "$((after - before))" "$( [ "$pre" = 1 ] && stats_of "$logs/cli-$pre.log" || echo -)"
}

echo
echo "iperf (iperf2) $A -> $B, $secs s, unmodified binary"
row "path" "throughput" "RDMA packets sent" "librsock counters (client)"
run_iperf "kernel TCP" 0
run_iperf "librsock (preload)" 1

echo
echo "nc: 50 MB file, unmodified nc on both ends, sha256 compared"
head -c 50000000 /dev/urandom >"$logs/data"
for pre in 0 1; do
	env=(env)
	[ "$pre" = 1 ] && env=(env LD_PRELOAD="$lib" RSOCK_STATS=1)
	port=$((5301 + pre))
	"${env[@]}" RSOCK_LOG_FILE="$logs/ncs-$pre.log" sh -c "exec nc -l -s $B -p $port >$logs/got-$pre" &
	srv=$!
	wait_port "$port"
	before=$(rxe_pkts)
	t0=$(date +%s.%N)
	"${env[@]}" RSOCK_LOG_FILE="$logs/ncc-$pre.log" timeout 120 nc -N -s "$A" "$B" "$port" <"$logs/data"
	wait "$srv" || true
	t1=$(date +%s.%N)
	same=$([ "$(sha256sum <"$logs/data")" = "$(sha256sum <"$logs/got-$pre")" ] && echo "digest equal" || echo "DIGEST DIFFERS")
	printf '| %-20s | %6.2f s | %8s RDMA packets | %s | %s\n' "$([ "$pre" = 1 ] && echo "librsock (preload)" || echo "kernel TCP")" \
		"$(echo "$t1 - $t0" | bc)" "$(($(rxe_pkts) - before))" "$same" "$([ "$pre" = 1 ] && stats_of "$logs/ncc-$pre.log" || echo -)"
done

echo
echo "raw RDMA reference: ib_write_bw -R (rdma_cm), 64 KiB messages, the transport's limit here"
ib_write_bw -R -F -d "$(dev_of "$A")" -s 65536 -D "$secs" -p 18600 >/dev/null 2>&1 &
sleep 1
ib_write_bw -R -F -d "$(dev_of "$B")" -s 65536 -D "$secs" -p 18600 --source_ip "$B" "$A" 2>/dev/null |
	awk '$1 == 65536 {print "| ib_write_bw | " $4 " MB/s average |"}' || true
wait || true
cat <<'NOTE'

The RDMA packet counts come from the devices themselves (hw_counters of
rxe, or of the real NIC): under librsock the bytes cross the RDMA devices,
over kernel TCP they do not. On soft-RoCE every RDMA packet goes through
the guest's software network stack, so absolute numbers say little about
real RoCE or InfiniBand hardware; bench/rdma.sh compares latency and
throughput with rsocket's preload library in one run.
NOTE
