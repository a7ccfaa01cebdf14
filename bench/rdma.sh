#!/usr/bin/env bash
# rdma.sh - a benchmark, not a test: one unmodified TCP program
# (bench/sockbench.c) over kernel TCP, under rsocket's preload library
# (librspreload.so from Debian's librdmacm1) and under librsock, in one run
# between the two RDMA addresses: 64-byte ping-pong latency (p50, p99,
# p99.9) and a 64 KiB-write stream. Median of RUNS runs each; a Markdown
# table with ratios goes to stdout and to bench/results/rdma-latest.md
# (written on the host: the guest's file system is a throw-away overlay).
#
# Usage: bench/rdma.sh          (builds first; runs in the soft-RoCE guest
#                                unless RSOCK_TEST_ADDR_A/B name two addresses
#                                of a host that has an RDMA device)
# Environment: RUNS (default 3), PP_COUNT (round trips, default 2000),
#              STREAM_MB (default 200).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ "${RSOCK_BENCH_INNER:-}" != 1 ]; then
	scripts/setup.sh >&2
	mkdir -p build/bench
	cc -O2 -g -Wall -Iinclude -o build/bench/sockbench bench/sockbench.c -ldl -lpthread
	mkdir -p bench/results
	if [ -n "${RSOCK_TEST_ADDR_A:-}" ] && ls /sys/class/infiniband/ 2>/dev/null | grep -q .; then
		env RSOCK_BENCH_INNER=1 "$0" "$@" | tee bench/results/rdma-latest.md.tmp
	else
		RSOCK_VM_CPU=${RSOCK_VM_CPU:-max} test/vm/vm-run env RSOCK_BENCH_INNER=1 RUNS="${RUNS:-3}" PP_COUNT="${PP_COUNT:-2000}" STREAM_MB="${STREAM_MB:-200}" "$0" "$@" | tee bench/results/rdma-latest.md.tmp
	fi
	mv bench/results/rdma-latest.md.tmp bench/results/rdma-latest.md
	exit 0
fi

A=${RSOCK_TEST_ADDR_A:?} B=${RSOCK_TEST_ADDR_B:?}
RUNS=${RUNS:-3} PP_COUNT=${PP_COUNT:-2000} STREAM_MB=${STREAM_MB:-200}
SB=$top/build/bench/sockbench
LIBRSOCK=$top/build/.libs/librsock.so
RSPRELOAD=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -n 1)
port=$((30000 + RANDOM % 20000))

# run_one PRELOAD MODE ARGS...: one server and one client, prints the client's line
run_one() {
	local pre=$1 mode=$2 out srv
	shift 2
	port=$((port + 1))
	env ${pre:+LD_PRELOAD=$pre} timeout 120 "$SB" server "$B" "$port" >/dev/null 2>&1 &
	srv=$!
	for _ in $(seq 100); do
		ss -ltn 2>/dev/null | grep -q ":$port " && break
		sleep 0.1
	done
	out=$(env ${pre:+LD_PRELOAD=$pre} timeout 120 "$SB" "$mode" "$B" "$port" "$A" "$@" 2>/dev/null || echo failed)
	wait "$srv" 2>/dev/null || true
	echo "$out"
}

# median of the lines on stdin, column by column
median() {
	sort -n -k1,1 | awk '{ l[NR] = $0 } END { print (NR ? l[int((NR + 1) / 2)] : "failed") }'
}

declare -A PP ST
for path in tcp rsocket librsock; do
	case $path in
	tcp) pre= ;;
	rsocket) pre=$RSPRELOAD ;;
	librsock) pre=$LIBRSOCK ;;
	esac
	if [ "$path" = rsocket ] && [ -z "$pre" ]; then
		PP[$path]=failed ST[$path]=failed
		continue
	fi
	PP[$path]=$(for _ in $(seq "$RUNS"); do run_one "$pre" pingpong 64 "$PP_COUNT"; done | grep -v failed | median)
	ST[$path]=$(for _ in $(seq "$RUNS"); do run_one "$pre" stream 65536 $((STREAM_MB * 1000000)); done | grep -v failed | median | awk '{ print $1 }')
	echo "bench: $path: ping-pong ${PP[$path]} us, stream ${ST[$path]} MB/s" >&2
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
col() { awk -v c="$2" '{ print $c }' <<<"$1"; }
{
	echo "### librsock vs kernel TCP vs rsocket ($(date -u +%Y-%m-%d), $(uname -r), ${RUNS} runs, median)"
	echo
	echo "| path | 64 B p50 µs | p99 µs | p99.9 µs | p50 vs TCP | 64 KiB stream MB/s | stream vs TCP |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	for path in tcp rsocket librsock; do
		p=${PP[$path]} s=${ST[$path]}
		echo "| $path | $(col "$p" 1) | $(col "$p" 2) | $(col "$p" 3) | $(ratio "$(col "$p" 1)" "$(col "${PP[tcp]}" 1)") | $s | $(ratio "$s" "${ST[tcp]}") |"
	done
}
