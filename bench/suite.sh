#!/usr/bin/env bash
# suite.sh - the benchmark suite (a benchmark, not a test): kernel TCP,
# rsocket's preload library (librspreload.so from Debian's librdmacm1),
# librsock and raw verbs (perftest over rdma_cm; bench/cmconnect.c for a bare
# rdma_cm connect) in one run between the two RDMA addresses, median of RUNS
# runs each:
#   - ping-pong latency p50/p99/p99.9, 16 B .. 64 KiB (bench/sockbench.c;
#     ib_write_lat and ib_send_lat, whose one-way figures are doubled), and
#     64 B with both ends on one CPU;
#   - streaming throughput, 1 KiB .. 1 MiB writes (2,000 writes, at most
#     STREAM_MB), 1 and 4 parallel streams (each of the 4 as long as the
#     single one, at most STREAM_MB/2; they start together once all are
#     connected: SOCKBENCH_START_US) (ib_write_bw on 1 and on 4 queue
#     pairs, MiB/s converted to MB/s);
#   - connection set-up: until connect() returns and until the first
#     exchange came back (the target: against a bare rdma_cm connect until
#     ESTABLISHED);
#     connections per second;
#   - CPU: user-space instructions on the client per 64 B message on the
#     send path (write()), the receive path (read()) and per round trip
#     (callgrind, the difference between two run lengths, busy-polling off),
#     the round trip by object (interposer, provider, libibverbs, libc), and
#     librsock's with CPU_IDLE other streams held open;
#   - memory: RSS and registered bytes per connection with HOLD connections
#     held open at once.
# Output: bench/results/suite-latest.md (tables with ratios and the issues'
# targets), suite-lat.dat, suite-bw.dat and two PNG plots (gnuplot), written
# on the host.
#
# Usage: bench/suite.sh     (builds first; runs in the soft-RoCE guest unless
#                            RSOCK_TEST_ADDR_A/B name two addresses of a host
#                            that has an RDMA device)
# Environment: RUNS (3), PP_COUNT (1000), STREAM_MB (40), CONN_COUNT (100),
#              HOLD (1000), CPU_MSGS (400), CPU_IDLE (1000; 0: no such row),
#              QUICK=1 (fewer sizes, one run).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ "${RSOCK_BENCH_INNER:-}" != 1 ]; then
	scripts/setup.sh >&2
	command -v gnuplot >/dev/null || { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends gnuplot-nox >&2; } || true
	mkdir -p build/bench bench/results
	cc -O2 -g -Wall -Iinclude -o build/bench/sockbench bench/sockbench.c -ldl -lpthread
	cc -O2 -g -Wall -o build/bench/cmconnect bench/cmconnect.c -lrdmacm -libverbs
	vars=(RSOCK_BENCH_INNER=1)
	for v in RUNS PP_COUNT STREAM_MB CONN_COUNT HOLD CPU_MSGS CPU_IDLE QUICK PATHS; do
		[ -n "${!v:-}" ] && vars+=("$v=${!v}")
	done
	raw=$(mktemp)
	if [ -n "${RSOCK_TEST_ADDR_A:-}" ] && ls /sys/class/infiniband/ 2>/dev/null | grep -q .; then
		env "${vars[@]}" "$0" >"$raw"
	else
		RSOCK_VM_TIMEOUT=${RSOCK_VM_TIMEOUT:-5400} RSOCK_VM_CPU=${RSOCK_VM_CPU:-max} test/vm/vm-run env "${vars[@]}" "$0" >"$raw"
	fi
	# The inner run prints files between "@@file NAME" lines.
	awk -v d=bench/results '/^@@file / { f = d "/" $2; printf "" > f; next } f { print >> f }' "$raw"
	rm -f "$raw"
	if command -v gnuplot >/dev/null; then
		gnuplot bench/plot.gp && echo "bench: plots in bench/results/suite-*.png" >&2
	fi
	cat bench/results/suite-latest.md
	exit 0
fi

A=${RSOCK_TEST_ADDR_A:?} B=${RSOCK_TEST_ADDR_B:?}
RUNS=${RUNS:-3} PP_COUNT=${PP_COUNT:-1000} STREAM_MB=${STREAM_MB:-40}
CONN_COUNT=${CONN_COUNT:-100} HOLD=${HOLD:-1000} CPU_MSGS=${CPU_MSGS:-400} CPU_IDLE=${CPU_IDLE:-1000}
LAT_SIZES="16 64 256 1024 4096 16384 65536"
BW_SIZES="1024 4096 16384 65536 262144 1048576"
if [ "${QUICK:-}" = 1 ]; then
	RUNS=1 LAT_SIZES="16 64 1024 4096 65536" BW_SIZES="16384 65536 1048576" HOLD=200 CONN_COUNT=30
fi
SB=$top/build/bench/sockbench
CMC=$top/build/bench/cmconnect
LIBRSOCK=$top/build/.libs/librsock.so
RSPRELOAD=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -n 1)
PATHS=${PATHS:-tcp rsocket librsock}
port=$((30000 + RANDOM % 20000))
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ulimit -l unlimited 2>/dev/null || true
log() { echo "bench: $*" >&2; }

# rdma_dev_of and wait_for_rdma_listen: the RDMA suite's helpers
BATS_TEST_DIRNAME=$top/test/rdma
# shellcheck source=test/rdma/helpers.bash
. "$top/test/rdma/helpers.bash"
DEV_A=$(rdma_dev_of "$A") DEV_B=$(rdma_dev_of "$B")

preload_of() {
	case $1 in
	tcp) echo "" ;;
	rsocket) echo "$RSPRELOAD" ;;
	librsock) echo "$LIBRSOCK" ;;
	esac
}

# shellcheck source=bench/common.sh
. "$top/bench/common.sh"

wait_cm_listen() { wait_for_rdma_listen "$1" 30 2>/dev/null; }

# rsocket's listener is an rdma_cm one, the others a kernel socket
wait_listen() {
	if [ "$1" = rsocket ]; then wait_cm_listen "$2"; else wait_port "$2" 15; fi
}

# sb PATH CONNS MODE SIZE N [PARALLEL]: one server, PARALLEL (default 1)
# clients at once; prints each client's line. PIN: a command both run
# under (taskset), or none.
PIN=()
sb() {
	local path=$1 conns=$2 mode=$3 size=$4 n=$5 par=${6:-1} pre srv pids=() i
	pre=$(preload_of "$path")
	if [ "$path" = rsocket ] && [ -z "$pre" ]; then
		echo failed
		return
	fi
	port=$((port + 1))
	env ${pre:+LD_PRELOAD=$pre} timeout 120 "${PIN[@]}" "$SB" server "$B" "$port" "$conns" >/dev/null 2>&1 &
	srv=$!
	wait_listen "$path" "$port" || { echo failed; kill "$srv" 2>/dev/null; return; }
	# parallel streams start together, a second from now: their
	# processes' start-up and connections (tens of ms each in a TCG
	# guest) would otherwise stagger them, and short streams of small
	# writes spent much of the measured time running fewer than PARALLEL
	local start=
	if [ "$par" -gt 1 ]; then
		start=$(($("$SB" now) + 1000000))
	fi
	for i in $(seq "$par"); do
		env ${pre:+LD_PRELOAD=$pre} ${start:+SOCKBENCH_START_US=$start} timeout 90 \
			"${PIN[@]}" "$SB" "$mode" "$B" "$port" "$A" "$size" "$n" >"/tmp/sb.$i" 2>/dev/null &
		pids+=($!)
	done
	for i in $(seq "$par"); do
		wait "${pids[$((i - 1))]}" || echo failed >"/tmp/sb.$i"
		cat "/tmp/sb.$i"
	done
	# a server whose client failed would wait for connections that never come
	for _ in $(seq 200); do
		kill -0 "$srv" 2>/dev/null || break
		sleep 0.1
	done
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
}

# the median line of stdin (by the first column), "failed" if none
median() {
	{ grep -v -e failed -e '^$' || true; } | sort -g -k1,1 |
		awk '{ l[NR] = $0 } END { print (NR ? l[int((NR + 1) / 2)] : "failed") }'
}
# aggregate PAR BYTES: the parallel streams' lines (MB/s start_us end_us) ->
# all their bytes over the time from the first start to the last end, MB/s
# ("failed" unless all PAR streams finished). Summing each stream's own rate
# would count a stream that ran partly alone at its solo speed.
aggregate() {
	awk -v par="$1" -v bytes="$2" '$1 + 0 > 0 && NF >= 3 {
		if (!n || $2 < s) s = $2
		if (!n || $3 > e) e = $3
		n++
	} END { if (n == par && e > s) printf "%.1f\n", par * bytes / (e - s); else print "failed" }'
}

# perftest PROG SIZE EXTRA...: server on A, client on B; prints the output
perftest() {
	local prog=$1 size=$2 out try
	shift 2
	for try in 1 2 3; do
		port=$((port + 1))
		timeout 120 "$prog" -R -F -d "$DEV_A" -s "$size" -p "$port" "$@" >/dev/null 2>&1 &
		wait_cm_listen "$port"
		out=$(timeout 120 "$prog" -R -F -d "$DEV_B" -s "$size" -p "$port" "$@" --source_ip "$B" "$A" 2>&1 || true)
		wait 2>/dev/null || true
		# perftest calibrates its cycle counter against the clock; under a
		# loaded TCG guest that can fail and every figure is "inf": retry
		grep -q inf <<<"$out" || break
	done
	echo "$out"
}
# one-way t_typical, p99, p99.9 -> round-trip figures
lat_raw() {
	perftest "$1" "$2" -n "$PP_COUNT" |
		awk -v s="$2" '$1 == s && $5 ~ /^[0-9.]+$/ { printf "%.1f %.1f %.1f\n", 2 * $5, 2 * $8, 2 * $9 }'
}
bw_raw() { # SIZE [QPS]: ib_write_bw's rate on QPS queue pairs (default 1)
	perftest ib_write_bw "$1" -n 200 -q "${2:-1}" |
		awk -v s="$1" '$1 == s && $4 ~ /^[0-9.]+$/ { printf "%.1f\n", $4 * 1.048576 }'
}

# The guest's speed drifts between modes that last minutes (the same
# binary's 64 B p50 has been 66 and 150 us in two runs): so each run
# measures every path in turn, the order rotated from run to run, and a
# path's figure is the median of its runs. A path measured only during a
# slow spell would otherwise be compared with one measured in a fast one.
# rotated R ITEMS...: the items, starting with the (R mod count)th
rotated() {
	local r=$1
	shift
	local items=("$@") i
	for ((i = 0; i < ${#items[@]}; i++)); do
		echo "${items[$(((i + r) % ${#items[@]}))]}"
	done
}
# interleave FUNCTION ITEMS...: RUNS rounds of "FUNCTION item" for every
# item, rotated; sets RES[item] to the median of its lines. FUNCTION runs
# in this shell (not a command substitution), so that the ports it takes
# stay taken.
declare -A RES
IL_OUT=$(mktemp)
interleave() {
	local fn=$1 r item
	shift
	declare -A got=()
	for r in $(seq "$RUNS"); do
		for item in $(rotated "$r" "$@"); do
			"$fn" "$item" >"$IL_OUT" 2>/dev/null || true
			got[$item]+="$(cat "$IL_OUT")"$'\n'
		done
	done
	RES=()
	for item in "$@"; do
		RES[$item]=$(printf '%s' "${got[$item]}" | median)
	done
}

declare -A LAT LAT1 BW BW4 CONN HOLDR CPU
# ---- latency ---------------------------------------------------------------
lat_one() { # PATH or perftest program, for $size
	case $1 in
	ib_*) lat_raw "$1" "$size" ;;
	*) sb "$1" 1 pingpong "$size" "$PP_COUNT" ;;
	esac
}
for size in $LAT_SIZES; do
	interleave lat_one $PATHS ib_write_lat ib_send_lat
	for k in $PATHS ib_write_lat ib_send_lat; do
		LAT[$k,$size]=${RES[$k]}
	done
	log "latency $size B: tcp ${LAT[tcp,$size]} rsocket ${LAT[rsocket,$size]} librsock ${LAT[librsock,$size]} write_lat ${LAT[ib_write_lat,$size]}"
done
# ---- latency with both ends on one CPU -------------------------------------
# (a client and its server on one host with fewer CPUs than busy threads:
# a waiter that spins keeps the CPU from the thread that would answer it)
one_cpu() { # PATH
	PIN=(taskset -c 0)
	sb "$1" 1 pingpong 64 "$PP_COUNT"
	PIN=()
}
interleave one_cpu $PATHS
for k in $PATHS; do
	LAT1[$k]=${RES[$k]}
done
log "latency 64 B on one CPU: tcp ${LAT1[tcp]} rsocket ${LAT1[rsocket]} librsock ${LAT1[librsock]}"
# ---- throughput ------------------------------------------------------------
bw_one() { # PATH, PATH:4 (4 parallel streams) or raw, for $size and $bytes
	case $1 in
	raw) bw_raw "$size" ;;
	raw:4) bw_raw "$size" 4 ;;
	*:4) sb "${1%:4}" 4 stream "$size" "$bytes4" 4 | aggregate 4 "$bytes4" ;;
	*) sb "$1" 1 stream "$size" "$bytes" ;;
	esac
}
for size in $BW_SIZES; do
	# 2,000 writes, at most STREAM_MB (small writes are slow on a TCG guest)
	bytes=$((size * 2000))
	[ "$bytes" -le $((STREAM_MB * 1000000)) ] || bytes=$((STREAM_MB * 1000000))
	# each of 4 parallel streams as long, at most half of STREAM_MB
	bytes4=$bytes
	[ "$bytes4" -le $((STREAM_MB * 500000)) ] || bytes4=$((STREAM_MB * 500000))
	items=()
	for path in $PATHS; do
		items+=("$path" "$path:4")
	done
	interleave bw_one "${items[@]}" raw raw:4
	for path in $PATHS; do
		BW[$path,$size]=${RES[$path]}
		BW4[$path,$size]=${RES[$path:4]}
	done
	BW[raw,$size]=${RES[raw]}
	BW4[raw,$size]=${RES[raw:4]}
	log "stream $size B: tcp ${BW[tcp,$size]} rsocket ${BW[rsocket,$size]} librsock ${BW[librsock,$size]} (x4 ${BW4[librsock,$size]}) write_bw ${BW[raw,$size]}"
done
# ---- connection set-up -----------------------------------------------------
conn_one() { # PATH or rdma_cm (bench/cmconnect.c)
	if [ "$1" = rdma_cm ]; then
		port=$((port + 1))
		timeout 120 "$CMC" server "$B" "$port" "$CONN_COUNT" >/dev/null 2>&1 &
		sleep 0.5
		timeout 120 "$CMC" client "$B" "$port" "$A" "$CONN_COUNT" 2>/dev/null || echo failed
		wait 2>/dev/null || true
	else
		sb "$1" "$CONN_COUNT" connect 1 "$CONN_COUNT"
	fi
}
interleave conn_one $PATHS rdma_cm
for k in $PATHS rdma_cm; do
	CONN[$k]=${RES[$k]}
done
log "connect: tcp ${CONN[tcp]} rsocket ${CONN[rsocket]} librsock ${CONN[librsock]} rdma_cm ${CONN[rdma_cm]}"
# ---- memory: HOLD connections at once --------------------------------------
for path in $PATHS; do
	HOLDR[$path]=$(sb "$path" "$HOLD" hold 1 "$HOLD" | median)
	log "hold $HOLD: $path ${HOLDR[$path]}"
done
# ---- CPU: instructions per round trip (client, user space) -----------------
if command -v valgrind >/dev/null && [ "$CPU_MSGS" -gt 0 ]; then
	mkdir -p /etc/rdma/rsocket 2>/dev/null && echo 0 >/etc/rdma/rsocket/polling_time 2>/dev/null || true
	# no busy-polling; RDMA or nothing (valgrind is slow: generous hand-shake time)
	CPU_ENV="RSOCK_POLL_US=0 RSOCK_MODE=rdma RSOCK_HANDSHAKE_MS=30000 RSOCK_PROBE_MS=30000"
	CG_OUT=$(mktemp -d)
	ir() { # PATH N [IDLE]: the client's instructions for N 64 B round trips (IDLE
		# connections held open before, SOCKBENCH_IDLE): "total write read" and
		# by object "library provider verbs libc other"
		local pre out f idle=${3:-0}
		pre=$(preload_of "$1")
		f=$CG_OUT/$1-$2-$idle.out
		port=$((port + 1))
		env ${pre:+LD_PRELOAD=$pre} $CPU_ENV timeout 900 "$SB" server "$B" "$port" $((idle + 1)) >/dev/null 2>&1 &
		wait_listen "$1" "$port" || { echo failed; return; }
		out=$(env ${pre:+LD_PRELOAD=$pre} $CPU_ENV SOCKBENCH_IDLE="$idle" timeout 1800 valgrind --tool=callgrind \
			--callgrind-out-file="$f" "$SB" pingpong "$B" "$port" "$A" 64 "$2" 2>&1 >/dev/null || true)
		wait 2>/dev/null || true
		awk '/Collected :/ { t = $NF } END { printf "%s ", t }' <<<"$out"
		# the calls of sockbench's full(), which reads or writes one
		# message: each call's inclusive count, so also what a wrapper
		# reaches by a tail jump (write -> write_slow)
		callgrind_annotate --tree=calling --inclusive=yes --threshold=100 "$f" 2>/dev/null |
			awk 'function n(s) { gsub(",", "", s); return s + 0 }
			/\*  .*sockbench\.c:full / { p = 1; next }
			p && /^ *[0-9,]+ .*>   / {
				if (match($0, /:[A-Za-z0-9_]+ \(/)) {
					fn = substr($0, RSTART + 1, RLENGTH - 3)
					if (fn ~ /^(r?write|r?send)/) w += n($1)
					else if (fn ~ /^(r?read|r?recv)/) r += n($1)
				}
				next
			}
			p { exit }
			END { printf "%d %d ", w, r }'
		# every function's own count, summed by the object it lives in:
		# the interposer (librsock; rsocket's librspreload and librdmacm),
		# the verbs provider (librxe), libibverbs, libc, the rest
		callgrind_annotate --inclusive=no --threshold=100 "$f" 2>/dev/null |
			awk 'function n(s) { gsub(",", "", s); return s + 0 }
			/^ *[0-9,]+ .*\[.*\]$/ {
				v = n($1)
				if ($0 ~ /librsock|librspreload|librdmacm/) l += v
				else if ($0 ~ /librxe|rdmav[0-9]/) p += v
				else if ($0 ~ /libibverbs/) b += v
				else if ($0 ~ /libc\.so/) c += v
				else o += v
			}
			END { printf "%d %d %d %d %d\n", l, p, b, c, o }'
		rm -f "$f"
	}
	# per round trip: the difference of two run lengths (pingpong runs
	# n + n/10 round trips), a field each
	per_rt() { # RUN_A RUN_B
		awk -v a="$1" -v b="$2" -v n="$CPU_MSGS" 'BEGIN {
			k = split(a, x, " "); split(b, y, " "); out = ""
			for (i = 1; i <= k; i++)
				out = out (x[1] + 0 > 0 && y[1] + 0 > x[1] ? sprintf("%.0f", (y[i] - x[i]) / (n * 1.1)) : "failed") " "
			sub(/ $/, "", out); print out }'
	}
	for path in $PATHS; do
		a=$(ir "$path" "$CPU_MSGS") b=$(ir "$path" $((2 * CPU_MSGS)))
		CPU[$path]=$(per_rt "$a" "$b")
		log "cpu: $path ${CPU[$path]} instructions per round trip (total, write, read; library provider verbs libc other)"
	done
	# one stream among CPU_IDLE others held open (no scan may grow with them)
	if [ "$CPU_IDLE" -gt 0 ] && [[ " $PATHS " == *" librsock "* ]]; then
		a=$(ir librsock "$CPU_MSGS" "$CPU_IDLE") b=$(ir librsock $((2 * CPU_MSGS)) "$CPU_IDLE")
		CPU[idle]=$(per_rt "$a" "$b")
		log "cpu: librsock with $CPU_IDLE idle streams: ${CPU[idle]}"
	fi
	rm -rf "$CG_OUT"
fi

# ---- report ----------------------------------------------------------------
c() { awk -v c="$2" '{ print ($1 == "failed" ? "-" : $c) }' <<<"$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
# the same unrounded, for a verdict: 63.3 / 248.5 shows as 0.25 but is
# above a quarter
ratio_x() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.9f", a / b; else print "-" }'; }
# shown with three decimals where two would hide which side of the limit it is
ratio_near() { awk -v a="$1" -v b="$2" -v lim="$3" 'BEGIN {
	if (!(a + 0 > 0 && b + 0 > 0)) { print "-"; exit }
	r = a / b; s = sprintf("%.2f", r)
	if (s + 0 == lim + 0 && r != lim + 0) s = sprintf("%.3f", r)
	print s }'; }
verdict() { awk -v v="$1" -v op="$2" -v lim="$3" 'BEGIN {
	if (v == "-" || v == "") { print "not measured"; exit }
	ok = (op == "<=") ? (v + 0 <= lim + 0) : (v + 0 >= lim + 0)
	print (ok ? "met" : "not met") }'; }

echo "@@file suite-lat.dat"
echo "# size tcp_p50 rsocket_p50 librsock_p50 ib_write_lat_rtt ib_send_lat_rtt"
for size in $LAT_SIZES; do
	echo "$size $(c "${LAT[tcp,$size]}" 1) $(c "${LAT[rsocket,$size]}" 1) $(c "${LAT[librsock,$size]}" 1) $(c "${LAT[ib_write_lat,$size]}" 1) $(c "${LAT[ib_send_lat,$size]}" 1)"
done
echo "@@file suite-bw.dat"
echo "# size tcp rsocket librsock tcp_x4 rsocket_x4 librsock_x4 ib_write_bw ib_write_bw_x4"
for size in $BW_SIZES; do
	echo "$size $(c "${BW[tcp,$size]}" 1) $(c "${BW[rsocket,$size]}" 1) $(c "${BW[librsock,$size]}" 1) $(c "${BW4[tcp,$size]}" 1) $(c "${BW4[rsocket,$size]}" 1) $(c "${BW4[librsock,$size]}" 1) $(c "${BW[raw,$size]}" 1) $(c "${BW4[raw,$size]}" 1)"
done
echo "@@file suite-latest.md"
echo "### Benchmark suite: kernel TCP, rsocket, librsock, raw verbs ($(date -u +%Y-%m-%d), $(uname -r), ${RUNS} run(s), median)"
echo
echo "Where: $( [ "${RSOCK_IN_VM:-0}" = 1 ] && echo "the soft-RoCE guest (TCG, two rxe devices over a veth pair): figures compare only within this run" || echo "$(uname -n)")."
echo "Raw verbs: perftest over rdma_cm; ib_*_lat report one-way latency, doubled here to compare with a round trip."
echo
echo "#### Ping-pong round trip, µs (p50 / p99 / p99.9)"
echo
echo "| size | kernel TCP | rsocket | librsock | ib_write_lat ×2 | ib_send_lat ×2 | librsock p50 vs TCP | vs ib_write_lat |"
echo "|---:|---|---|---|---|---|---:|---:|"
for size in $LAT_SIZES; do
	row="| $size"
	for k in tcp rsocket librsock ib_write_lat ib_send_lat; do
		v=${LAT[$k,$size]}
		row+=" | $(c "$v" 1) / $(c "$v" 2) / $(c "$v" 3)"
	done
	echo "$row | $(ratio "$(c "${LAT[librsock,$size]}" 1)" "$(c "${LAT[tcp,$size]}" 1)") | $(ratio "$(c "${LAT[librsock,$size]}" 1)" "$(c "${LAT[ib_write_lat,$size]}" 1)") |"
done
echo
echo "64 B round trip with client and server on one CPU (taskset -c 0), µs (p50 / p99 / p99.9), and p50 against kernel TCP's:"
echo
echo "| kernel TCP | rsocket | librsock | librsock vs TCP | rsocket vs TCP |"
echo "|---|---|---|---:|---:|"
row=""
for k in tcp rsocket librsock; do
	v=${LAT1[$k]}
	row+="| $(c "$v" 1) / $(c "$v" 2) / $(c "$v" 3) "
done
echo "$row| $(ratio "$(c "${LAT1[librsock]}" 1)" "$(c "${LAT1[tcp]}" 1)") | $(ratio "$(c "${LAT1[rsocket]}" 1)" "$(c "${LAT1[tcp]}" 1)") |"
echo
echo "#### Streaming throughput, MB/s (1 stream; 4 parallel streams, each as long as the one (at most STREAM_MB/2) and started together: all their bytes over the time from the first start to the last end)"
echo
echo "| write size | kernel TCP | rsocket | librsock | TCP ×4 | rsocket ×4 | librsock ×4 | ib_write_bw | ib_write_bw, 4 QPs | librsock vs TCP | vs ib_write_bw | ×4 vs 4 QPs |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for size in $BW_SIZES; do
	echo "| $size | $(c "${BW[tcp,$size]}" 1) | $(c "${BW[rsocket,$size]}" 1) | $(c "${BW[librsock,$size]}" 1) | $(c "${BW4[tcp,$size]}" 1) | $(c "${BW4[rsocket,$size]}" 1) | $(c "${BW4[librsock,$size]}" 1) | $(c "${BW[raw,$size]}" 1) | $(c "${BW4[raw,$size]}" 1) | $(ratio "$(c "${BW[librsock,$size]}" 1)" "$(c "${BW[tcp,$size]}" 1)") | $(ratio "$(c "${BW[librsock,$size]}" 1)" "$(c "${BW[raw,$size]}" 1)") | $(ratio "$(c "${BW4[librsock,$size]}" 1)" "$(c "${BW4[raw,$size]}" 1)") |"
done
echo
echo "#### Connection set-up ($CONN_COUNT connections one after the other)"
echo
echo "Set-up: from socket() until connect() returned (bare rdma_cm: from creating the id until ESTABLISHED, QP included)."
echo "First byte: until the server's one-byte answer to a 16-byte request came back, the connection's first exchange."
echo "librsock's connect() returns once its hello is sent (the RDMA connection is made by the library's thread, or at the stream's first use): its set-up target is judged on the first byte, which includes the whole handshake."
echo
echo "| path | set-up p50 µs | vs bare rdma_cm | first byte p50 µs | connections/s |"
echo "|---|---:|---:|---:|---:|"
for k in tcp rsocket librsock; do
	echo "| $k | $(c "${CONN[$k]}" 3) | $(ratio "$(c "${CONN[$k]}" 3)" "$(c "${CONN[rdma_cm]}" 1)") | $(c "${CONN[$k]}" 1) | $(c "${CONN[$k]}" 2) |"
done
echo "| rdma_cm | $(c "${CONN[rdma_cm]}" 1) | 1.00 | - | $(c "${CONN[rdma_cm]}" 2) |"
echo
echo "#### Memory with $HOLD connections held open at once (client side, per connection)"
echo
echo "| path | RSS KiB | registered bytes |"
echo "|---|---:|---:|"
for k in $PATHS; do
	echo "| $k | $(c "${HOLDR[$k]}" 1) | $(c "${HOLDR[$k]}" 2) |"
done
if [ "${#CPU[@]}" -gt 0 ]; then
	echo
	echo "#### CPU: user-space instructions on the client, 64 B messages (callgrind, busy-polling off)"
	echo
	echo "| path | send path (a write()) | vs rsocket | receive path (a read()) | vs rsocket | whole round trip | vs rsocket |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	for k in $PATHS; do
		echo "| $k | $(c "${CPU[$k]}" 2) | $(ratio "$(c "${CPU[$k]}" 2)" "$(c "${CPU[rsocket]}" 2)") |" \
			"$(c "${CPU[$k]}" 3) | $(ratio "$(c "${CPU[$k]}" 3)" "$(c "${CPU[rsocket]}" 3)") |" \
			"$(c "${CPU[$k]}" 1) | $(ratio "$(c "${CPU[$k]}" 1)" "$(c "${CPU[rsocket]}" 1)") |"
	done
	if [ -n "${CPU[idle]:-}" ]; then
		echo "| librsock, $CPU_IDLE other streams open | $(c "${CPU[idle]}" 2) | $(ratio "$(c "${CPU[idle]}" 2)" "$(c "${CPU[librsock]}" 2)") of 1 |" \
			"$(c "${CPU[idle]}" 3) | $(ratio "$(c "${CPU[idle]}" 3)" "$(c "${CPU[librsock]}" 3)") of 1 |" \
			"$(c "${CPU[idle]}" 1) | $(ratio "$(c "${CPU[idle]}" 1)" "$(c "${CPU[librsock]}" 1)") of 1 |"
	fi
	echo
	echo "The whole round trip by object (the interposer: librsock, or rsocket's librspreload and librdmacm):"
	echo
	echo "| path | interposer | verbs provider (librxe) | libibverbs | libc | the rest (benchmark, ld.so) |"
	echo "|---|---:|---:|---:|---:|---:|"
	for k in $PATHS ${CPU[idle]:+idle}; do
		echo "| ${k/#idle/librsock, $CPU_IDLE other streams open} | $(c "${CPU[$k]}" 4) | $(c "${CPU[$k]}" 5) | $(c "${CPU[$k]}" 6) | $(c "${CPU[$k]}" 7) | $(c "${CPU[$k]}" 8) |"
	done
	echo
	echo "Each figure is the difference between two run lengths, per round trip. The send path is"
	echo "the same every time; the receive path includes the wait for the answer (a sleep: arming"
	echo "the completion queue, the system calls' wrappers), which varies with how often the answer"
	echo "is already there, and so does the whole round trip (the benchmark's own loop included)."
	echo "Kernel TCP's cost is in the kernel, which callgrind does not see."
fi
l64=$(c "${LAT[librsock,64]:-failed}" 1) t64=$(c "${LAT[tcp,64]:-failed}" 1) w64=$(c "${LAT[ib_write_lat,64]:-failed}" 1)
s64=$(c "${BW[librsock,65536]:-failed}" 1) st64=$(c "${BW[tcp,65536]:-failed}" 1) r64=$(c "${BW[raw,65536]:-failed}" 1)
# behind SIZES ARRAY OP: the sizes where librsock is not ahead of rsocket
# in ARRAY (LAT, BW or BW4), ahead meaning librsock OP rsocket (< for a
# latency, > for a rate)
behind() {
	local -n m=$2
	local size a b out=""
	for size in $1; do
		a=$(c "${m[librsock,$size]}" 1) b=$(c "${m[rsocket,$size]}" 1)
		awk -v a="$a" -v b="$b" -v op="$3" \
			'BEGIN { exit !(a != "-" && (b == "-" || (op == "<" ? a + 0 < b + 0 : a + 0 > b + 0))) }' ||
			out="$out${out:+, }$size"
	done
	echo "$out"
}
# a target row for "ahead of rsocket": behind()'s sizes
ahead_row() {
	local what=$1 sizes=$2
	if [ -z "$sizes" ]; then
		echo "| $what | yes | met |"
	else
		echo "| $what | no ($sizes B) | not met |"
	fi
}
echo
echo "#### The targets (issue 6), this run"
echo
echo "| target | measured | |"
echo "|---|---:|---|"
# target_row TEXT A B OP LIMIT: the ratio A / B against LIMIT
target_row() {
	echo "| $1 | $(ratio_near "$2" "$3" "$5")× | $(verdict "$(ratio_x "$2" "$3")" "$4" "$5") |"
}
target_row "64 B p50 ≤ 1.5× ib_write_lat (round trip)" "$l64" "$w64" '<=' 1.5
target_row "64 B p50 ≤ 0.25× kernel TCP" "$l64" "$t64" '<=' 0.25
target_row "64 KiB stream ≥ 0.9× ib_write_bw" "$s64" "$r64" '>=' 0.9
target_row "64 KiB stream ≥ 1.5× kernel TCP" "$s64" "$st64" '>=' 1.5
ahead_row "better than rsocket at every size: p50 round trip" "$(behind "$LAT_SIZES" LAT "<")"
ahead_row "better than rsocket at every size: one stream" "$(behind "$BW_SIZES" BW ">")"
ahead_row "better than rsocket at every size: 4 parallel streams" "$(behind "$BW_SIZES" BW4 ">")"
target_row "set-up (until the first byte came back) ≤ 2× bare rdma_cm connect" "$(c "${CONN[librsock]}" 1)" "$(c "${CONN[rdma_cm]}" 1)" '<=' 2
echo "| ≤ 512 KiB registered per connection, $HOLD held | $(c "${HOLDR[librsock]}" 2) B | $(verdict "$(c "${HOLDR[librsock]}" 2)" '<=' 524288) |"
echo
echo "#### The targets (issue 38), this run"
echo
echo "| target | measured | |"
echo "|---|---:|---|"
target_row "short connection (connect, 16 B request, 1 B answer) p50 ≤ 1.5× kernel TCP" "$(c "${CONN[librsock]:-failed}" 1)" "$(c "${CONN[tcp]:-failed}" 1)" '<=' 1.5
target_row "connections per second ≥ 0.7× kernel TCP" "$(c "${CONN[librsock]:-failed}" 2)" "$(c "${CONN[tcp]:-failed}" 2)" '>=' 0.7
target_row "client instructions per 64 B round trip ≤ 0.7× rsocket's" "$(c "${CPU[librsock]:-failed}" 1)" "$(c "${CPU[rsocket]:-failed}" 1)" '<=' 0.7
target_row "send path instructions below rsocket's" "$(c "${CPU[librsock]:-failed}" 2)" "$(c "${CPU[rsocket]:-failed}" 2)" '<=' 0.999
target_row "receive path instructions below rsocket's" "$(c "${CPU[librsock]:-failed}" 3)" "$(c "${CPU[rsocket]:-failed}" 3)" '<=' 0.999
target_row "64 B round trip p50 ≤ 1.2× ib_write_lat ×2" "$l64" "$w64" '<=' 1.2
target_row "64 KiB stream ≥ 0.95× ib_write_bw" "$s64" "$r64" '>=' 0.95
target_row "4 × 64 KiB streams ≥ 0.95× ib_write_bw on 4 QPs" "$(c "${BW4[librsock,65536]:-failed}" 1)" "$(c "${BW4[raw,65536]:-failed}" 1)" '>=' 0.95
target_row "instructions per round trip with $CPU_IDLE open streams within 5 % of 1" "$(c "${CPU[idle]:-failed}" 1)" "$(c "${CPU[librsock]:-failed}" 1)" '<=' 1.05
echo
echo "A fresh process's first connection (the third target) is bench/firstconn.sh's."
echo
echo "Plots: suite-lat.png (p50 round trip by size), suite-bw.png (one stream by write size)."
