#!/usr/bin/env bash
# closecost.sh - what close() of a stream costs the application (a benchmark,
# not a test; issue 38): one client process makes COUNT connections one after
# the other and times each close() (`sockbench close`), in two cases:
#   exchange:  16 B out and 16 B back, then close (the peer has read all);
#   write:     SIZE bytes written (256 KiB), then close at once (the bytes may
#              still be on their way; the server counts them to EOF and fails
#              on a short count),
# over kernel TCP (neither end preloaded) and librsock (both ends), the paths
# alternating round by round. Reports, per case and path, the median over the
# rounds of close()'s p50, p99 and maximum, and connections per second.
#
# Output: bench/results/closecost-latest.md (written on the host).
# Usage: bench/closecost.sh     (builds sockbench; runs in the soft-RoCE guest)
# Environment: ROUNDS (3) rounds per path, COUNT (100) connections per round,
#              SIZE (262144) bytes of the write case; BASE: another build's
#              librsock.so (a path the guest sees, not under /tmp), run as a
#              third path "base" in the same rounds (a before and after).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ "${RSOCK_BENCH_INNER:-}" != 1 ]; then
	mkdir -p build/bench bench/results
	cc -O2 -g -Wall -Iinclude -o build/bench/sockbench bench/sockbench.c -ldl -lpthread
	raw=$(mktemp)
	RSOCK_VM_TIMEOUT=${RSOCK_VM_TIMEOUT:-1200} test/vm/vm-run env RSOCK_BENCH_INNER=1 \
		ROUNDS="${ROUNDS:-3}" COUNT="${COUNT:-100}" SIZE="${SIZE:-262144}" BASE="${BASE:-}" \
		"$0" >"$raw"
	awk -v d=bench/results '/^@@file / { f = d "/" $2; printf "" > f; next } f { print >> f }' "$raw"
	rm -f "$raw"
	cat bench/results/closecost-latest.md
	exit 0
fi

B=${RSOCK_TEST_ADDR_B:?}
ROUNDS=${ROUNDS:-3} COUNT=${COUNT:-100} SIZE=${SIZE:-262144} BASE=${BASE:-}
SB=$top/build/bench/sockbench
LIBRSOCK=$top/build/.libs/librsock.so
port=$((30000 + RANDOM % 20000))
log() { echo "bench: $*" >&2; }
# shellcheck source=bench/common.sh
. "$top/bench/common.sh"

# one CASE PATH PORT: one round; prints "p50 p99 max conns/s", or "failed"
# (also when a librsock round's streams did not all go over RDMA)
one() {
	local size=0 pre="" srv out st=/tmp/closecost-stats.$$
	[ "$1" = write ] && size=$SIZE
	[ "$2" = librsock ] && pre=$LIBRSOCK
	[ "$2" = base ] && pre=$BASE
	env ${pre:+LD_PRELOAD=$pre} timeout 300 "$SB" server "$B" "$3" "$COUNT" >/dev/null &
	srv=$!
	wait_port "$3" 15 || { log "$1 $2: no server"; echo failed; return; }
	rm -f "$st"
	out=$(env ${pre:+LD_PRELOAD=$pre RSOCK_STATS=1 RSOCK_LOG_FILE=$st} timeout 300 \
		"$SB" close "$B" "$3" - "$size" "$COUNT") || out=failed
	wait "$srv" || out=failed
	if [ -n "$pre" ] && ! grep -q "streams tcp=0 rdma=$COUNT " "$st"; then
		log "$1 $2: not all on RDMA: $(grep 'stats:' "$st")"
		out=failed
	fi
	echo "$out"
}


declare -A ROWS
cases="exchange write"
paths="tcp librsock${BASE:+ base}"
for case in $cases; do
	for ((k = 1; k <= ROUNDS; k++)); do
		for path in $paths; do
			port=$((port + 1))
			ROWS[$case.$path]+="$(one "$case" "$path" "$port")"$'\n'
		done
	done
	for path in $paths; do
		log "$case $path: $(tr '\n' '|' <<<"${ROWS[$case.$path]}")"
	done
done

# col CASE PATH N: the median of column N over the rounds
col() { awk -v n="$3" 'NF >= 4 { print $n }' <<<"${ROWS[$1.$2]}" | median_first; }

echo "@@file closecost-latest.md"
echo "### close() of a stream ($(date -u +%Y-%m-%d), soft-RoCE guest, median of $ROUNDS rounds of $COUNT connections)"
echo
echo "One client process, connections one after the other (\`bench/closecost.sh\`): exchange = 16 B out"
echo "and back, then close; write = $SIZE B written, then close at once (the server counts every byte)."
echo "Target (issue 38): close() of an RDMA stream no dearer than kernel TCP's.${BASE:+ base: another build of the library (BASE).}"
echo
echo "| case | path | close() p50 µs | p99 | max | p50 against TCP | conns/s |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for case in $cases; do
	t=$(col "$case" tcp 1)
	for path in $paths; do
		p=$(col "$case" "$path" 1)
		echo "| $case | $path | $p | $(col "$case" "$path" 2) | $(col "$case" "$path" 3) | $(ratio_x "$p" "$t") | $(col "$case" "$path" 4) |"
	done
done
echo
echo "Each round (p50 p99 max conns/s):"
echo
for case in $cases; do
	for path in $paths; do
		echo "- $case $path: $(awk 'NF { printf "%s%s", (NR > 1 ? "; " : ""), $0 }' <<<"${ROWS[$case.$path]}")"
	done
done
