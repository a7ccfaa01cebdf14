#!/usr/bin/env bash
# firstconn.sh - a fresh process's first connection (a benchmark, not a
# test): N fresh client processes one after the other, each making one
# connection as a command-line tool does (socket, connect without binding,
# 16 B out and 16 B back, close: `sockbench first`), against
#   plain:    a server without librsock on an RDMA address (B),
#   no-rdma:  a server without librsock on an address with no RDMA device
#             behind it (RSOCK_TEST_ADDR_PLAIN_PEER),
#   librsock: a server under librsock on B,
# each client over kernel TCP (no preload) and under librsock, the paths
# alternating process by process. Median of N, and the ratio to kernel TCP's
# (issue 38's target: at most 1.5x for plain and no-rdma). Two times per
# process: "in process" from socket() until close() returned, and "process"
# from the shell's fork until the process's exit (loading, the library's
# constructor, exit's drain included). Also the close() of the last
# connections and each process's figures in order (the first process of a
# user finds no shared negative cache; the later ones do).
#
# Output: bench/results/firstconn-latest.md (written on the host).
# Usage: bench/firstconn.sh     (builds sockbench; runs in the soft-RoCE guest)
# Environment: RUNS (5): processes per case and path; RSOCK_LOG_DIR: keep
#              each librsock client's debug log there (in the guest's /tmp
#              unless the directory is the per-run share).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ "${RSOCK_BENCH_INNER:-}" != 1 ]; then
	mkdir -p build/bench bench/results
	cc -O2 -g -Wall -Iinclude -o build/bench/sockbench bench/sockbench.c -ldl -lpthread
	raw=$(mktemp)
	RSOCK_VM_TIMEOUT=${RSOCK_VM_TIMEOUT:-900} test/vm/vm-run env RSOCK_BENCH_INNER=1 \
		RUNS="${RUNS:-5}" "$0" >"$raw"
	awk -v d=bench/results '/^@@file / { f = d "/" $2; printf "" > f; next } f { print >> f }' "$raw"
	rm -f "$raw"
	cat bench/results/firstconn-latest.md
	exit 0
fi

A=${RSOCK_TEST_ADDR_A:?} B=${RSOCK_TEST_ADDR_B:?} P=${RSOCK_TEST_ADDR_PLAIN_PEER:?}
RUNS=${RUNS:-5}
SB=$top/build/bench/sockbench
LIBRSOCK=$top/build/.libs/librsock.so
port=$((30000 + RANDOM % 20000))
log() { echo "bench: $*" >&2; }
# shellcheck source=bench/common.sh
. "$top/bench/common.sh"

# now_us: the shell's clock, microseconds
now_us() { local t=${EPOCHREALTIME/./}; echo "$((10#$t))"; }

# one CASE PATH: one fresh client; prints "total connect exchange close wall"
one() {
	local case=$1 path=$2 addr t0 out
	addr=$B
	[ "$case" = no-rdma ] && addr=$P
	t0=$(now_us)
	if [ "$path" = librsock ]; then
		out=$(env LD_PRELOAD="$LIBRSOCK" ${RSOCK_LOG_DIR:+RSOCK_LOG_LEVEL=debug} \
			${RSOCK_LOG_DIR:+RSOCK_LOG_FILE=$RSOCK_LOG_DIR/$case.$path.$k.log} \
			timeout 30 "$SB" first "$addr" "$port" - 16 1 2>/dev/null) || out=failed
	else
		out=$(timeout 30 "$SB" first "$addr" "$port" - 16 1 2>/dev/null) || out=failed
	fi
	echo "$out $(($(now_us) - t0))"
}


declare -A ROWS
cases="plain no-rdma librsock"
for case in $cases; do
	port=$((port + 1))
	addr=$B
	[ "$case" = no-rdma ] && addr=$P
	srvpre=
	[ "$case" = librsock ] && srvpre=$LIBRSOCK
	env ${srvpre:+LD_PRELOAD=$srvpre} timeout 300 "$SB" server "$addr" "$port" $((2 * RUNS)) \
		>/dev/null 2>&1 &
	srv=$!
	wait_port "$port" 15 || { log "$case: no server"; exit 1; }
	for ((k = 1; k <= RUNS; k++)); do
		for path in tcp librsock; do
			ROWS[$case.$path]+="$(one "$case" "$path")"$'\n'
		done
	done
	wait "$srv" || log "$case: the server failed"
	for path in tcp librsock; do
		log "$case $path: $(tr '\n' '|' <<<"${ROWS[$case.$path]}")"
	done
done

# col CASE PATH N: the median of column N over the case's processes
col() { awk -v n="$3" 'NF >= 5 && $1 != "failed" { print $n }' <<<"${ROWS[$1.$2]}" | median_first; }

echo "@@file firstconn-latest.md"
echo "### A fresh process's first connection ($(date -u +%Y-%m-%d), soft-RoCE guest, median of $RUNS processes)"
echo
echo "Each process: socket, connect (no bind), 16 B out and back, close (\`bench/firstconn.sh\`)."
echo "In process: socket() until close() returned; process: fork until exit, as the shell sees it."
echo "Target (issue 38): librsock at most 1.5x kernel TCP for plain and no-rdma."
echo
echo "| server | in process: TCP µs | librsock µs | ratio | process: TCP µs | librsock µs | ratio | librsock connect µs | close µs: TCP | librsock |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for case in $cases; do
	t=$(col "$case" tcp 1) l=$(col "$case" librsock 1)
	tw=$(col "$case" tcp 5) lw=$(col "$case" librsock 5)
	echo "| $case | $t | $l | $(ratio_x "$l" "$t") | $tw | $lw | $(ratio_x "$lw" "$tw") | $(col "$case" librsock 2) | $(col "$case" tcp 4) | $(col "$case" librsock 4) |"
done
echo
echo "Each librsock process in order, in process µs (the first finds no shared cache):"
echo
for case in $cases; do
	echo "- $case: $(awk '{ printf "%s%s", (NR > 1 ? ", " : ""), $1 }' <<<"${ROWS[$case.librsock]}") (TCP: $(awk '{ printf "%s%s", (NR > 1 ? ", " : ""), $1 }' <<<"${ROWS[$case.tcp]}"))"
done
