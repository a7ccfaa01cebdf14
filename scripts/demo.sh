#!/usr/bin/env bash
# demo.sh - the main job: an unmodified program (iperf, iperf2) carrying a
# stream between two addresses, over kernel TCP and under librsock, side by
# side, with the RDMA device counters and librsock's own counters showing
# which path carried the bytes; raw verbs (ib_write_bw) as the reference.
# Runs in the soft-RoCE guest (test/vm/vm-run) when this host has no RDMA
# device; on an RDMA host, set RSOCK_TEST_ADDR_A and RSOCK_TEST_ADDR_B.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ "${RSOCK_DEMO_INNER:-}" != 1 ]; then
	scripts/setup.sh
	if [ "${RSOCK_IN_VM:-}" != 1 ] && ! { command -v ibv_devices >/dev/null &&
		[ "$(ibv_devices 2>/dev/null | awk 'NR>2' | wc -l)" -gt 0 ] &&
		[ -n "${RSOCK_TEST_ADDR_A:-}" ]; }; then
		echo "demo: no RDMA device here: running in the soft-RoCE guest" >&2
		exec test/vm/vm-run env RSOCK_DEMO_INNER=1 scripts/demo.sh
	fi
fi

A=${RSOCK_TEST_ADDR_A:?} B=${RSOCK_TEST_ADDR_B:?}
lib=$top/build/.libs/librsock.so
secs=${RSOCK_DEMO_SECONDS:-5}
rxe_pkts() { rdma statistic show 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "sent_pkts") s += $(i + 1)} END {print s + 0}'; }

run_iperf() { # label, preload(0|1) -> prints one table row
	local label=$1 pre=$2 env=() out before after stats
	[ "$pre" = 1 ] && env=(env LD_PRELOAD="$lib" RSOCK_STATS=1 RSOCK_LOG_FILE=/tmp/rsock-demo-$label.log)
	"${env[@]}" iperf -s -B "$B" -p 5201 >/dev/null 2>&1 &
	local srv=$!
	sleep 1
	before=$(rxe_pkts)
	out=$("${env[@]}" iperf -c "$B" -B "$A" -p 5201 -t "$secs" -l 64K -f m 2>&1 | awk '/Mbits\/sec/ {print $(NF-1), $NF}' | tail -1)
	after=$(rxe_pkts)
	kill $srv 2>/dev/null; wait $srv 2>/dev/null || true
	stats=""
	[ "$pre" = 1 ] && stats=$(grep -ho 'streams tcp=[0-9]* rdma=[0-9]*' /tmp/rsock-demo-$label.log | tail -1)
	printf '| %-22s | %14s | %16s | %s\n' "$label" "${out:-failed}" "$((after - before))" "${stats:--}"
}

echo
echo "iperf (iperf2) $A -> $B, $secs s, 64 KiB writes"
printf '| %-22s | %14s | %16s | %s\n' "path" "throughput" "rxe packets sent" "librsock counters"
run_iperf "kernel TCP" 0
run_iperf "librsock (preload)" 1
echo
echo "raw RDMA reference: ib_write_bw -R (rdma_cm), 64 KiB messages"
ib_write_bw -R -s 65536 -D "$secs" --bind_source_ip "$A" >/dev/null 2>&1 &
sleep 1
ib_write_bw -R -s 65536 -D "$secs" "$A" --source_ip "$B" 2>/dev/null | awk '/^ *65536/ {print "| ib_write_bw | " $4 " MB/s average |"}' || true
wait || true
cat <<'NOTE'

Note: this version of librsock is the interposition foundation: every call
is passed to kernel TCP through the library's descriptor table (the counters
show the stream as tcp, and the rxe packet count under librsock is the same
as without it). The RDMA stream transport is the next milestone (see
doc/design.md, section 8).
NOTE
