#!/usr/bin/env bash
# shm.sh - the same-host path (the library's default between two librsock
# processes of one host) against kernel TCP over loopback (issue 39's
# table): sockbench's 64 B round trip (p50, p99) and 64 KiB-write stream,
# redis-benchmark GET and SET with 1 and 8 connections, nginx with wrk,
# and the client's user-space instructions per 64 B round trip
# (callgrind). Servers on CPU 0, clients on CPU 1; each same-host figure
# is kept only when the client's counters show its streams on shm.
# Usage: bench/shm.sh [BUILD_DIR]
#   ROUNDS, STREAM_MB, REDIS_N, WRK_S override the sizes; RUNS (default 3)
#   the runs of the server benchmarks (their median is shown).
# Prints a Markdown table and writes it to bench/results/shm.md (keeping
# the sweep's section of that file).
#
# Usage: bench/shm.sh sweep [BUILD_DIR]
#   the curves beside TCP loopback, as bench/suite.sh draws the RDMA
#   suite's: sockbench's round trip p50 and one stream at each message size
#   (SWEEP_SIZES, default 64 B to 1 MiB by powers of 4), kernel TCP against
#   the same-host path with and without busy-polling, median of RUNS runs
#   (the three in turn, the order rotated from run to run). Writes
#   bench/results/shm-lat.dat, shm-bw.dat, shm-lat.png and shm-bw.png
#   (bench/plot.gp) and the section "By message size" of shm.md.
# shellcheck disable=SC2046 # env_of's words are split on purpose
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=table
if [ "${1:-}" = sweep ]; then
	mode=sweep
	shift
fi
build=${1:-${RSOCK_BUILD_DIR:-$here/../build}}
lib=$build/.libs/librsock.so
[ -r "$lib" ] || { echo "shm.sh: no $lib (build first)" >&2; exit 2; }
rounds=${ROUNDS:-20000} mb=${STREAM_MB:-1024} rn=${REDIS_N:-50000} wrk_s=${WRK_S:-3} runs=${RUNS:-3}
work=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cc -O2 -pthread -I"$here/../include" -o "$work/sb" "$here/sockbench.c" -ldl
ncpu=$(nproc)
cs=0 cc_=$((ncpu > 1 ? 1 : 0))
load0=$(cut -d' ' -f1-3 /proc/loadavg)

# ports from a random base below the ephemeral range (a connection's
# local port there would make a server's bind fail), skipping those in
# use (other work on the host listens too)
read -r eph _ </proc/sys/net/ipv4/ip_local_port_range
port=$((eph > 12000 ? 10000 + RANDOM % (eph - 12000) : 40000 + RANDOM % 10000))
next_port() {
	port=$((port + 1))
	while ss -Htan "sport = :$port" | grep -q .; do port=$((port + 1)); done
}
# env_of MODE NAME: the environment of a process of MODE (tcp: no library;
# shm: the library, its counters to NAME.log; shm0: the same without the
# busy-poll, RSOCK_POLL_US=0)
env_of() {
	case $1 in
	tcp) echo "" ;;
	shm) echo "LD_PRELOAD=$lib RSOCK_STATS=1 RSOCK_LOG_FILE=$work/$2.log" ;;
	shm0) echo "LD_PRELOAD=$lib RSOCK_STATS=1 RSOCK_POLL_US=0 RSOCK_LOG_FILE=$work/$2.log" ;;
	esac
}
# on_shm MODE NAME: for a same-host mode, NAME's streams were all on shm;
# NAME's log is removed (the library appends to it: a later run's check
# sees that run's counters only)
on_shm() {
	[ "$1" = tcp ] && return 0
	local rc=0
	grep -qE 'stats: streams tcp=0 rdma=0 shm=[1-9]' "$work/$2.log" 2>/dev/null || {
		echo "shm.sh: $2 ($1) did not run on the same-host path:" >&2
		cat "$work/$2.log" >&2 2>/dev/null || true
		rc=1
	}
	rm -f "$work/$2.log"
	return $rc
}
wait_port() {
	for _ in $(seq 1 200); do
		ss -ltn "sport = :$1" | grep -q LISTEN && return 0
		sleep 0.02
	done
	return 1
}
# the median of the numbers of stdin ("-": none)
median() { awk '$1 ~ /^[0-9]/' | sort -n | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "-" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 && b + 0) printf "%.2fx", a / b; else print "-" }'; }
# the same to three significant digits (the sweep's ratios span 0.001x-100x)
ratio3() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 && b + 0) printf "%.3gx", a / b; else print "-" }'; }

# sb MODE KIND SIZE COUNT: one sockbench server (one connection) and
# client; prints the client's line, or "- - -" when the client failed or a
# same-host client's stream was not on shm
sb() {
	local m=$1 kind=$2 size=$3 count=$4 out=
	next_port
	env $(env_of "$m" sbs) taskset -c $cs "$work/sb" server 127.0.0.1 $port 1 &
	local srv=$!
	if wait_port $port && kill -0 $srv 2>/dev/null; then
		out=$(env $(env_of "$m" sbc) taskset -c $cc_ "$work/sb" "$kind" 127.0.0.1 $port 127.0.0.1 "$size" "$count") || out=
	fi
	kill $srv 2>/dev/null || true
	wait $srv 2>/dev/null || true
	if [ -n "$out" ] && on_shm "$m" sbc; then echo "$out"; else echo "- - -"; fi
}

# redis MODE: requests/s of redis-benchmark (64 B values) GET and SET, -c 1
# and -c 8, one line each: "set1 get1 set8 get8"
redis_run() {
	local m=$1 out=() c
	next_port
	env $(env_of "$m" rsrv) taskset -c $cs redis-server --port $port --bind 127.0.0.1 --save '' \
		--appendonly no --daemonize no --loglevel warning >/dev/null &
	local srv=$!
	wait_port $port
	for c in 1 8; do
		env $(env_of "$m" "rb$c") taskset -c $cc_ redis-benchmark -h 127.0.0.1 -p $port -q -n "$rn" \
			-c $c -t set,get -d 64 2>/dev/null | tr '\r' '\n' >"$work/rb.txt"
		on_shm "$m" "rb$c"
		out+=("$(awk '/^SET: [0-9]/ {print $2}' "$work/rb.txt")" "$(awk '/^GET: [0-9]/ {print $2}' "$work/rb.txt")")
	done
	kill $srv; wait $srv 2>/dev/null || true
	echo "${out[*]}"
}

# nginx MODE: requests/s of wrk (1 thread, 8 connections) on a 1 KiB file,
# one nginx worker
nginx_run() {
	local m=$1 d=$work/ng-$1
	next_port
	mkdir -p "$d/www" "$d/tmp"
	head -c 1024 /dev/urandom >"$d/www/1k"
	cat >"$d/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 256; }
http {
	access_log off;
	client_body_temp_path $d/tmp/body;
	proxy_temp_path $d/tmp/proxy;
	fastcgi_temp_path $d/tmp/fastcgi;
	uwsgi_temp_path $d/tmp/uwsgi;
	scgi_temp_path $d/tmp/scgi;
	server { listen 127.0.0.1:$port; root $d/www; }
}
EOF
	env $(env_of "$m" ngs) taskset -c $cs nginx -c "$d/nginx.conf" -e "$d/error.log" >/dev/null 2>&1 &
	local srv=$!
	wait_port $port
	env $(env_of "$m" wrk) taskset -c $cc_ wrk -t 1 -c 8 -d "${wrk_s}s" "http://127.0.0.1:$port/1k" 2>/dev/null |
		awk '/^Requests\/sec/ {printf "%.0f\n", $2}'
	on_shm "$m" wrk
	kill $srv; wait $srv 2>/dev/null || true
}

# ir MODE N: the sockbench client's user-space instructions for N 64 B round
# trips and the warm-up tenth (callgrind; no busy-poll)
ir() {
	local m=$1 n=$2
	next_port
	env $(env_of "$m" irs) RSOCK_POLL_US=0 "$work/sb" server 127.0.0.1 $port 1 >/dev/null &
	local srv=$!
	wait_port $port
	env $(env_of "$m" irc) RSOCK_POLL_US=0 valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
		"$work/sb" pingpong 127.0.0.1 $port 127.0.0.1 64 "$n" 2>&1 >/dev/null |
		awk '/Collected :/ { print $NF }'
	wait $srv
	on_shm "$m" irc
}

# ---- bench/shm.sh sweep ------------------------------------------------------
sweep_heading="## By message size"
md=$here/results/shm.md
if [ "$mode" = sweep ]; then
	sizes=${SWEEP_SIZES:-"64 256 1024 4096 16384 65536 262144 1048576"}
	modes=(tcp shm shm0)
	declare -A LAT BW
	for size in $sizes; do
		# round trips: 2^28 B each way at most, 500 to 10,000 of them
		n=$(((1 << 28) / size))
		n=$((n < 500 ? 500 : n > 10000 ? 10000 : n))
		# one stream: 200,000 writes, at most STREAM_MB
		bytes=$((size * 200000))
		bytes=$((bytes > (mb << 20) ? (mb << 20) : bytes))
		unset got
		declare -A got=()
		for r in $(seq 1 "$runs"); do
			for i in 0 1 2; do
				m=${modes[$(((i + r) % 3))]}
				got[lat$m]+="$(sb "$m" pingpong "$size" "$n" | awk '{print $1}')"$'\n'
				next_port
				got[bw$m]+="$(sb "$m" stream "$size" "$bytes" | awk '{print $1}')"$'\n'
				next_port
			done
		done
		for m in "${modes[@]}"; do
			LAT[$m,$size]=$(printf '%s' "${got[lat$m]}" | median)
			BW[$m,$size]=$(printf '%s' "${got[bw$m]}" | median)
		done
		echo "shm.sh: $size B: p50 us tcp ${LAT[tcp,$size]} shm ${LAT[shm,$size]} shm0 ${LAT[shm0,$size]};" \
			"MB/s tcp ${BW[tcp,$size]} shm ${BW[shm,$size]} shm0 ${BW[shm0,$size]}" >&2
	done
	load1=$(cut -d' ' -f1-3 /proc/loadavg)
	mkdir -p "$here/results"
	{
		echo "# size tcp_p50_us shm_p50_us shm_nopoll_p50_us"
		for size in $sizes; do echo "$size ${LAT[tcp,$size]} ${LAT[shm,$size]} ${LAT[shm0,$size]}"; done
	} >"$here/results/shm-lat.dat"
	{
		echo "# size tcp_MBps shm_MBps shm_nopoll_MBps"
		for size in $sizes; do echo "$size ${BW[tcp,$size]} ${BW[shm,$size]} ${BW[shm0,$size]}"; done
	} >"$here/results/shm-bw.dat"
	command -v gnuplot >/dev/null || { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends gnuplot-nox >&2; } || true
	if command -v gnuplot >/dev/null; then
		(cd "$here/.." && gnuplot -e 'bench = "shm"' bench/plot.gp) && echo "shm.sh: plots in bench/results/shm-*.png" >&2
	fi
	{
		echo "$sweep_heading"
		echo
		echo "\`bench/shm.sh sweep\`: sockbench's round trip (p50 of 256 MiB / size round trips, at least"
		echo "500 and at most 10,000, after a tenth's warm-up) and one stream (200,000 writes of the size, at"
		echo "most $mb MiB, until the server's one-byte answer) at each message size: kernel TCP over"
		echo "loopback against the same-host path, busy-polling (the default) and with \`RSOCK_POLL_US=0\`."
		echo "Server on CPU $cs, client on CPU $cc_ of $ncpu; the three one after the other, the order rotated"
		echo "from run to run, median of $runs runs; a same-host figure is kept only when the client's counters"
		echo "show its stream on shm (\"-\" otherwise). Load average at the start $load0, at the end"
		echo "$load1. Data: [shm-lat.dat](shm-lat.dat), [shm-bw.dat](shm-bw.dat)."
		echo
		echo "![Round trip p50 by message size](shm-lat.png)"
		echo
		echo "![One stream by write size](shm-bw.png)"
		echo
		echo "| size (B) | round trip p50 (µs): kernel TCP | same-host | ratio | same-host, RSOCK_POLL_US=0 | stream (MB/s): kernel TCP | same-host | ratio | same-host, RSOCK_POLL_US=0 |"
		echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		for size in $sizes; do
			echo "| $size | ${LAT[tcp,$size]} | ${LAT[shm,$size]} | $(ratio3 "${LAT[shm,$size]}" "${LAT[tcp,$size]}") | ${LAT[shm0,$size]} |" \
				"${BW[tcp,$size]} | ${BW[shm,$size]} | $(ratio3 "${BW[shm,$size]}" "${BW[tcp,$size]}") | ${BW[shm0,$size]} |"
		done
	} >"$work/sweep.md"
	# shm.md: the table's part as it is, this section in place of the last one's
	if [ -f "$md" ]; then
		sed "/^$sweep_heading\$/,\$d" "$md" |
			awk '{ l[NR] = $0 } END { n = NR; while (n && l[n] == "") n--; for (i = 1; i <= n; i++) print l[i] }' >"$work/head.md"
	else
		: >"$work/head.md"
	fi
	{
		cat "$work/head.md"
		[ -s "$work/head.md" ] && echo
		cat "$work/sweep.md"
	} >"$md"
	cat "$work/sweep.md"
	exit 0
fi

# ---- bench/shm.sh: the table ---------------------------------------------------
# the sweep's section of shm.md, kept
kept=$(sed -n "/^$sweep_heading\$/,\$p" "$md" 2>/dev/null || true)
read -r tp50 tp99 _ <<<"$(sb tcp pingpong 64 "$rounds")"
read -r sp50 sp99 _ <<<"$(sb shm pingpong 64 "$rounds")"
tmb=$(sb tcp stream 65536 $((mb << 20)) | awk '{print $1}')
smb=$(sb shm stream 65536 $((mb << 20)) | awk '{print $1}')
declare -A R
for m in tcp shm shm0; do
	command -v redis-server >/dev/null || break
	for _ in $(seq 1 "$runs"); do redis_run $m; done >"$work/redis-$m"
	for i in 1 2 3 4; do R[$m$i]=$(awk -v i=$i '{print $i}' "$work/redis-$m" | median); done
done
declare -A W
for m in tcp shm shm0; do
	if ! command -v nginx >/dev/null || ! command -v wrk >/dev/null; then break; fi
	W[$m]=$(for _ in $(seq 1 "$runs"); do nginx_run $m; done | median)
done
declare -A I
if command -v valgrind >/dev/null; then
	for m in tcp shm; do
		a=$(ir $m 1000) b=$(ir $m 3000)
		I[$m]=$(awk -v a="${a//,/}" -v b="${b//,/}" 'BEGIN { printf "%.0f", (b - a) / 2200 }')
	done
fi
mkdir -p "$here/results"
row() { # label tcp shm [shm without busy-poll]
	echo "| $1 | $2 | $3 | $(ratio "$3" "$2") |${4:+ $4 ($(ratio "$4" "$2"))} |"
}
{
	echo "# The same-host path against kernel TCP over loopback"
	echo
	echo "\`bench/shm.sh\` (the library's default between two librsock processes of one host, each"
	echo "same-host figure kept only when the client's counters show its streams on shm; servers"
	echo "on CPU $cs, clients on CPU $cc_ of $ncpu; server benchmarks: median of $runs runs)."
	echo "Load average at the start $load0, at the end $(cut -d' ' -f1-3 /proc/loadavg)."
	echo
	echo "| measure (loopback) | kernel TCP | same-host path | ratio | same-host, RSOCK_POLL_US=0 |"
	echo "|---|---:|---:|---:|---:|"
	echo "| 64 B round trip p50 (us) | $tp50 | $sp50 | $(ratio "$sp50" "$tp50") | |"
	echo "| 64 B round trip p99 (us) | $tp99 | $sp99 | $(ratio "$sp99" "$tp99") | |"
	echo "| 64 KiB writes, $mb MiB (MB/s) | $tmb | $smb | $(ratio "$smb" "$tmb") | |"
	if [ -n "${R[tcp1]:-}" ]; then
		row "redis-benchmark SET, 1 connection (req/s)" "${R[tcp1]}" "${R[shm1]}" "${R[shm01]}"
		row "redis-benchmark GET, 1 connection (req/s)" "${R[tcp2]}" "${R[shm2]}" "${R[shm02]}"
		row "redis-benchmark SET, 8 connections (req/s)" "${R[tcp3]}" "${R[shm3]}" "${R[shm03]}"
		row "redis-benchmark GET, 8 connections (req/s)" "${R[tcp4]}" "${R[shm4]}" "${R[shm04]}"
	fi
	[ -n "${W[tcp]:-}" ] && row "nginx + wrk, 8 connections, 1 KiB (req/s)" "${W[tcp]}" "${W[shm]}" "${W[shm0]}"
	[ -n "${I[tcp]:-}" ] && echo "| user-space instructions per 64 B round trip (client) | ${I[tcp]} | ${I[shm]} | $(ratio "${I[shm]}" "${I[tcp]}") | |"
	[ -z "$kept" ] || printf '\n%s\n' "$kept"
} | tee "$md"
