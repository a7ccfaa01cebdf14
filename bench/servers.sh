#!/usr/bin/env bash
# servers.sh - a benchmark, not a test: unmodified event-driven servers and
# their load generators over kernel TCP and under librsock, in one run
# between the two RDMA addresses: redis-benchmark (SET, GET, 8 connections
# with and without -P 16, and one connection), memcached -t 4 with memcslap,
# nginx (master and 2 workers) with wrk.
# Median of RUNS runs; a Markdown table with the ratio librsock / TCP goes to
# stdout and to bench/results/servers-latest.md (written on the host). The
# "rdma streams" column is librsock's own count (RSOCK_STATS) of the load
# generator's streams carried by RDMA, so a fallback cannot pass for a result.
#
# Usage: bench/servers.sh    (builds first; runs in the soft-RoCE guest unless
#                             RSOCK_TEST_ADDR_A/B name two addresses of a host
#                             that has an RDMA device)
# Environment: RUNS (default 3), REDIS_N (default 20000), WRK_S (default 5).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ "${RSOCK_BENCH_INNER:-}" != 1 ]; then
	scripts/setup.sh >&2
	mkdir -p bench/results
	if [ -n "${RSOCK_TEST_ADDR_A:-}" ] && ls /sys/class/infiniband/ 2>/dev/null | grep -q .; then
		env RSOCK_BENCH_INNER=1 "$0" "$@" | tee bench/results/servers-latest.md.tmp
	else
		RSOCK_VM_CPU=${RSOCK_VM_CPU:-max} test/vm/vm-run env RSOCK_BENCH_INNER=1 RUNS="${RUNS:-3}" REDIS_N="${REDIS_N:-20000}" WRK_S="${WRK_S:-5}" "$0" "$@" | tee bench/results/servers-latest.md.tmp
	fi
	mv bench/results/servers-latest.md.tmp bench/results/servers-latest.md
	exit 0
fi

B=${RSOCK_TEST_ADDR_B:?}
RUNS=${RUNS:-3} REDIS_N=${REDIS_N:-20000} WRK_S=${WRK_S:-5}
LIB=$top/build/.libs/librsock.so
port=$((30000 + RANDOM % 20000))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# shellcheck source=bench/common.sh
. "$top/bench/common.sh"

# pre MODE: the environment prefix of a process in MODE (tcp|rsock), whose
# stats go to $work/$2.log
pre() {
	if [ "$1" = rsock ]; then
		echo env LD_PRELOAD=$LIB RSOCK_STATS=1 RSOCK_LOG_FILE=$work/$2.log
	else
		echo env
	fi
}

# rdma_streams LOG: streams carried by RDMA in a stats line
rdma_streams() {
	grep -oE 'streams tcp=[0-9]+ rdma=[0-9]+' "$1" 2>/dev/null | tail -n 1 | sed 's/streams //' || true
}

median() {
	sort -g | awk '{ l[NR] = $0 } END { print (NR ? l[int((NR + 1) / 2)] : "failed") }'
}

declare -A R S
# redis MODE: one redis-server, the four redis-benchmark figures appended to
# $work/redis-MODE-{set,get,set16,get16}
redis() {
	local m=$1 p srv
	port=$((port + 1))
	p=$port
	$(pre "$m" redis-srv) redis-server --port "$p" --bind "$B" --save '' --appendonly no \
		--protected-mode no --dir "$work" >/dev/null 2>&1 &
	srv=$!
	wait_port "$p" 10
	# 8 connections, without and with -P 16; then one connection, where
	# each request waits for the answer to the one before (latency-bound)
	for pl in 1 16 c1; do
		local c=8 pp=$pl n=$REDIS_N
		[ "$pl" = c1 ] && c=1 pp=1 n=$((REDIS_N / 4))
		$(pre "$m" "redis-$m-$pl") redis-benchmark -h "$B" -p "$p" -t set,get -n "$n" -c "$c" -P "$pp" -q 2>/dev/null |
			tr '\r' '\n' | grep -E '^(SET|GET): [0-9.]+ requests' >"$work/rb.txt" || true
		sfx=$([ "$pl" = 1 ] || echo "$pl")
		awk '/^SET/ {print $2}' "$work/rb.txt" >>"$work/redis-set$sfx-$m"
		awk '/^GET/ {print $2}' "$work/rb.txt" >>"$work/redis-get$sfx-$m"
		S[redis$pl-$m]=$(rdma_streams "$work/redis-$m-$pl.log")
	done
	kill "$srv" 2>/dev/null
	wait "$srv" 2>/dev/null || true
}

# memcached MODE: sets per second of memcslap (8 threads)
memc() {
	local m=$1 p srv t
	port=$((port + 1))
	p=$port
	$(pre "$m" memc-srv) memcached -t 4 -l "$B" -p "$p" -U 0 -u nobody >/dev/null 2>&1 &
	srv=$!
	wait_port "$p" 10
	t=$($(pre "$m" "memc-$m") memcslap --servers="$B:$p" --concurrency=8 --execute-number=2000 2>/dev/null |
		grep -oE 'Time to set +16000 keys by +8 threads: +[0-9.]+' | awk '{print $NF}')
	[ -n "$t" ] && awk -v t="$t" 'BEGIN { printf "%.0f\n", 16000 / t }' >>"$work/memc-$m"
	S[memc-$m]=$(rdma_streams "$work/memc-$m.log")
	kill "$srv" 2>/dev/null
	wait "$srv" 2>/dev/null || true
}

# nginx MODE: requests per second of wrk (2 threads, 16 connections) on a 1 KiB file
nginx_run() {
	local m=$1 p d=$work/nginx-dir-$1
	port=$((port + 1))
	p=$port
	mkdir -p "$d/www" "$d/tmp"
	head -c 1024 /dev/urandom >"$d/www/1k"
	cat >"$d/nginx.conf" <<EOF
user root;
worker_processes 2;
daemon off;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 256; }
http {
	access_log off;
	sendfile on;
	client_body_temp_path $d/tmp; proxy_temp_path $d/tmp; fastcgi_temp_path $d/tmp;
	uwsgi_temp_path $d/tmp; scgi_temp_path $d/tmp;
	server { listen $B:$p; root $d/www; }
}
EOF
	$(pre "$m" nginx-srv) nginx -c "$d/nginx.conf" -e "$d/error.log" >/dev/null 2>&1 &
	local srv=$!
	wait_port "$p" 10
	$(pre "$m" "wrk-$m") wrk -t 2 -c 16 -d "${WRK_S}s" "http://$B:$p/1k" 2>/dev/null |
		awk '/^Requests\/sec/ {printf "%.0f\n", $2}' >>"$work/nginx-$m"
	S[nginx-$m]=$(rdma_streams "$work/wrk-$m.log")
	kill -QUIT "$srv" 2>/dev/null
	wait "$srv" 2>/dev/null || true
}

for _ in $(seq "$RUNS"); do
	for m in tcp rsock; do
		redis "$m"
		memc "$m"
		if command -v wrk >/dev/null && command -v nginx >/dev/null; then nginx_run "$m"; fi
	done
done

row() { # NAME FILE-STEM STREAMS-KEY
	local t r
	t=$(median <"$work/$2-tcp" 2>/dev/null || echo failed)
	r=$(median <"$work/$2-rsock" 2>/dev/null || echo failed)
	printf '| %s | %s | %s | %s | %s |\n' "$1" "$t" "$r" \
		"$(awk -v a="$r" -v b="$t" 'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "%.2fx", a / b; else print "-" }')" \
		"${S[$3]:-?}"
}

echo "# Event-driven servers over kernel TCP and librsock ($(date -u +%Y-%m-%d), $(uname -r), median of $RUNS)"
echo
echo "Requests (or sets) per second, higher is better. rdma streams: the load generator's streams under librsock, as librsock counted them."
echo
echo "| workload | kernel TCP | librsock | librsock / TCP | librsock streams |"
echo "|---|---:|---:|---:|---|"
row "redis-benchmark SET (-c 8)" redis-set redis1-rsock
row "redis-benchmark GET (-c 8)" redis-get redis1-rsock
row "redis-benchmark SET -P 16" redis-set16 redis16-rsock
row "redis-benchmark GET -P 16" redis-get16 redis16-rsock
row "redis-benchmark SET (-c 1)" redis-setc1 redisc1-rsock
row "redis-benchmark GET (-c 1)" redis-getc1 redisc1-rsock
row "memcached -t 4, memcslap sets (8 threads)" memc memc-rsock
if [ -s "$work/nginx-tcp" ]; then
	row "nginx (2 workers) + wrk, 1 KiB GET" nginx nginx-rsock
fi
