#!/usr/bin/env bats
# Real, unmodified programs, client and server both under the library
# (plain LD_PRELOAD and rsock-run), against a plain run: the bytes must be
# identical and the exit statuses the same. RSOCK_STATS=1 proves the library
# was active: both ends on this host run it, so their streams take the
# same-host path (doc/design.md, "The same-host path").

load helpers

MODES="plain preload rsockrun"

setup_file() {
	require_build
	# libasan preloaded first makes curl itself hang (in setlocale, before
	# main; librsock plays no part): in that case the HTTP client is
	# fetch.py (python3 urllib), said so in the TAP output.
	export RSOCK_HTTP_CLIENT=curl
	if [ -n "${RSOCK_SAN_PRELOAD:-}" ] &&
		! timeout -k 1 5 env LD_PRELOAD="$RSOCK_SAN_PRELOAD" curl --version >/dev/null 2>&1; then
		RSOCK_HTTP_CLIENT=fetch.py
		echo "# note: curl does not run with $RSOCK_SAN_PRELOAD preloaded (even without librsock); the HTTP client is test/bats/fetch.py" >&3
	fi
}

# http_get MODE URL OUT [--code]: GET URL into OUT with curl (or fetch.py,
# see setup_file) in MODE; --code prints "HTTP_CODE SIZE".
http_get() {
	local mode=$1 url=$2 out=$3
	if [ "$RSOCK_HTTP_CLIENT" = curl ]; then
		if [ "${4:-}" = --code ]; then
			bounded 30 in_mode "$mode" curl -sS --max-time 25 -o "$out" -w '%{http_code} %{size_download}\n' "$url"
		else
			bounded 30 in_mode "$mode" curl -sS --max-time 25 -o "$out" "$url"
		fi
	else
		bounded 30 in_mode "$mode" python3 "$BATS_TEST_DIRNAME/fetch.py" "$url" "$out" ${4:+"$4"}
	fi
}

setup() {
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	stop_all_bg
}

# same_status NAME: NAME.MODE.rc equal for all modes, and 0.
same_status() {
	local m
	for m in $MODES; do
		if [ "$(cat "$1.$m.rc")" != "$(cat "$1.plain.rc")" ]; then
			echo "$1: exit status $(cat "$1.$m.rc") under $m, $(cat "$1.plain.rc") plain" >&2
			return 1
		fi
	done
	[ "$(cat "$1.plain.rc")" = 0 ] || { echo "$1: exits $(cat "$1.plain.rc") even without the library" >&2; return 1; }
}

@test "curl <- python3 -m http.server: byte-exact, same exit status, library active" {
	require_cmd curl python3
	local m port pid rc
	mkdir -p www
	rand_file www/file.bin 3000000
	for m in $MODES; do
		port=$(free_port)
		start_bg "http.$m" in_mode $m python3 -m http.server --bind 127.0.0.1 --directory www "$port"
		pid=$BG_PID
		wait_for_port "$port" 20 "$pid"
		rc=0
		http_get $m "http://127.0.0.1:$port/file.bin" "got.$m" 2>"curl.$m.err" || rc=$?
		echo "$rc" >"curl.$m.rc"
		stop_bg "$pid"
		cat "curl.$m.err"
		same_file www/file.bin "got.$m" "curl ($m)"
	done
	same_status curl
	stats_active curl.preload.err shm
	stats_active curl.rsockrun.err shm
}

@test "nc client -> nc -l server, 4 MB: byte-exact, same exit status, library active" {
	require_cmd nc
	local m port pid rc
	rand_file data.bin 4000000
	for m in $MODES; do
		port=$(free_port)
		start_bg "ncsrv.$m" in_mode $m nc -l 127.0.0.1 "$port"
		pid=$BG_PID
		wait_for_port "$port" 15 "$pid"
		rc=0
		bounded 30 in_mode $m nc -N 127.0.0.1 "$port" <data.bin >/dev/null 2>"nc.$m.err" || rc=$?
		echo "$rc" >"nc.$m.rc"
		rc=0
		wait_bg "$pid" 20 || rc=$?
		echo "$rc" >"ncsrv.$m.rc"
		same_file data.bin "ncsrv.$m.out" "nc server received ($m)"
	done
	same_status nc
	same_status ncsrv
	stats_active nc.preload.err shm
	stats_active nc.rsockrun.err shm
	stats_active ncsrv.preload.err shm
	stats_active ncsrv.rsockrun.err shm
}

@test "nc -l server -> nc client, 4 MB: byte-exact, same exit status, library active" {
	require_cmd nc
	local m port pid rc
	rand_file data.bin 4000000
	for m in $MODES; do
		port=$(free_port)
		BG_STDIN=data.bin start_bg "ncsrv.$m" in_mode $m nc -N -l 127.0.0.1 "$port"
		pid=$BG_PID
		wait_for_port "$port" 15 "$pid"
		rc=0
		bounded 30 in_mode $m nc -d 127.0.0.1 "$port" >"got.$m" 2>"nc.$m.err" || rc=$?
		echo "$rc" >"nc.$m.rc"
		rc=0
		wait_bg "$pid" 20 || rc=$?
		echo "$rc" >"ncsrv.$m.rc"
		same_file data.bin "got.$m" "nc client received ($m)"
	done
	same_status nc
	same_status ncsrv
	stats_active nc.preload.err shm
	stats_active nc.rsockrun.err shm
	stats_active ncsrv.rsockrun.err shm
}

@test "iperf3 client and server, -n 20M: exit 0, the JSON reports the bytes" {
	require_cmd iperf3 python3
	local m port pid rc
	for m in $MODES; do
		port=$(free_port)
		start_bg "iperfsrv.$m" in_mode $m iperf3 -s -1 -B 127.0.0.1 -p "$port"
		pid=$BG_PID
		wait_for_port "$port" 15 "$pid"
		rc=0
		bounded 40 in_mode $m iperf3 -c 127.0.0.1 -p "$port" -n 20M -J >"iperf.$m.json" 2>"iperf.$m.err" || rc=$?
		echo "$rc" >"iperf.$m.rc"
		rc=0
		wait_bg "$pid" 15 || rc=$?
		echo "$rc" >"iperfsrv.$m.rc"
		python3 - "iperf.$m.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
sent = j["end"]["sum_sent"]["bytes"]
recv = j["end"]["sum_received"]["bytes"]
print("iperf3 %s: sent %d received %d" % (sys.argv[1], sent, recv))
assert sent >= 20 * 1024 * 1024, "sent %d" % sent
assert recv > 0, "received %d" % recv
PY
	done
	same_status iperf
	same_status iperfsrv
	stats_active iperf.preload.err shm
	stats_active iperfsrv.rsockrun.err shm
}

@test "redis-server + redis-benchmark + redis-cli SET/GET round trip" {
	require_cmd redis-server redis-benchmark redis-cli
	local m port pid rc val
	val="v-$RANDOM-$RANDOM-$(head -c 600 /dev/urandom | base64 -w0)"
	for m in $MODES; do
		port=$(free_port)
		mkdir -p "redis.$m"
		start_bg "redissrv.$m" in_mode $m redis-server --port "$port" --bind 127.0.0.1 \
			--save '' --appendonly no --daemonize no --dir "$BATS_TEST_TMPDIR/redis.$m" --loglevel warning
		pid=$BG_PID
		wait_for_port "$port" 15 "$pid"
		rc=0
		bounded 60 in_mode $m redis-benchmark -h 127.0.0.1 -p "$port" -q -n 2000 -c 10 -t set,get,incr,lpush,mset \
			>"bench.$m.out" 2>"bench.$m.err" || rc=$?
		echo "$rc" >"bench.$m.rc"
		tr '\r' '\n' <"bench.$m.out" | grep -E 'requests per second' | sed 's/:.*//' >"bench.$m.tests"
		rc=0
		{
			bounded 15 in_mode $m redis-cli -h 127.0.0.1 -p "$port" SET rsock:key "$val" &&
			bounded 15 in_mode $m redis-cli -h 127.0.0.1 -p "$port" GET rsock:key &&
			bounded 15 in_mode $m redis-cli -h 127.0.0.1 -p "$port" DBSIZE
		} >"cli.$m.out" 2>"cli.$m.err" || rc=$?
		echo "$rc" >"cli.$m.rc"
		bounded 15 in_mode $m redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
		rc=0
		wait_bg "$pid" 15 || rc=$?
		echo "$rc" >"redissrv.$m.rc"
	done
	same_status bench
	same_status cli
	for m in preload rsockrun; do
		diff -u bench.plain.tests "bench.$m.tests"
		diff -u cli.plain.out "cli.$m.out"
	done
	[ "$(sed -n 2p cli.plain.out)" = "$val" ]
	[ "$(wc -l <bench.plain.tests)" -ge 5 ]
	# the server exits the same way when told to shut down
	diff redissrv.plain.rc redissrv.preload.rc
	diff redissrv.plain.rc redissrv.rsockrun.rc
	stats_active cli.preload.err shm
	stats_active bench.rsockrun.err shm
}

@test "nginx serving a file to curl (sendfile): byte-exact, same exit status, library active" {
	require_cmd curl
	local nginx m port pid rc dir
	nginx=$(command -v nginx || echo /usr/sbin/nginx)
	[ -x "$nginx" ] || { echo "nginx is not installed (nginx-light)" >&2; false; }
	rand_file file.bin 5000000
	for m in $MODES; do
		port=$(free_port)
		dir=$BATS_TEST_TMPDIR/nginx.$m
		nginx_conf "$dir" "$port"
		cp file.bin "$dir/www/file.bin"
		start_bg "nginx.$m" in_mode $m "$nginx" -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log"
		pid=$BG_PID
		wait_for_port "$port" 15 "$pid" || { cat "$dir/logs/error.log" >&2; false; }
		rc=0
		http_get $m "http://127.0.0.1:$port/file.bin" "got.$m" 2>"ngcurl.$m.err" || rc=$?
		echo "$rc" >"ngcurl.$m.rc"
		# a second request on the same server: headers only, status line
		http_get $m "http://127.0.0.1:$port/file.bin" "got2.$m" --code >"code.$m" 2>>"ngcurl.$m.err" ||
			echo "$?" >"ngcurl.$m.rc"
		stop_bg "$pid"
		same_file file.bin "got.$m" "nginx -> curl ($m)"
	done
	same_status ngcurl
	diff code.plain code.preload
	diff code.plain code.rsockrun
	[ "$(cat code.plain)" = "200 5000000" ]
	stats_active ngcurl.preload.err shm
	stats_active ngcurl.rsockrun.err shm
}

@test "the exec family and posix_spawn run programs with their arguments and environment under the preload" {
	run bounded with_preload "$SOCKCHECK" --exec
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"exec: 12 of 12"* ]]
}

@test "a client whose stream stays on TCP loads no rdma-core (librdmacm, libibverbs, libnl)" {
	require_cmd python3
	local addr port
	# a non-loopback address of this host, where there is one: the
	# connect() takes the local check there (no RDMA device: TCP)
	addr=$(ip -4 -o addr show scope global 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
	addr=${addr:-127.0.0.1}
	port=$(free_port)
	start_bg srv python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4)
c, _ = s.accept(); c.sendall(c.recv(4)); c.close()
' "$addr" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	RSOCK_STATS=1 run bounded 30 with_preload python3 -c '
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.sendall(b"ping"); assert c.recv(4) == b"ping"; c.close()
maps = open("/proc/self/maps").read()
print("loaded:", [n for n in ("librdmacm", "libibverbs", "libnl") if n in maps])
' "$addr" "$port"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"loaded: []"* ]]
	[[ "$output" == *"info: stats: streams tcp=1 "* ]]
}
