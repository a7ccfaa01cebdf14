#!/usr/bin/env bats
# Unmodified programs over RDMA: each server and client moves checked bytes
# between the two RDMA addresses with librsock on both ends, and librsock's
# counters (and the RDMA device's, where a test says so) show that RDMA
# carried them. Each program stands for a way of using sockets (threads,
# pre-fork workers, event loops, sendfile, splice, TLS, runtimes with their own
# I/O) that the library must carry without the program noticing.

load ../bats/helpers
load rsock

# ---- benchmarks and transfer tools ------------------------------------------

@test "iperf (iperf2): a 3 s stream over RDMA" {
	require_cmd iperf
	local port
	port=$(free_port)
	rdma_snapshot
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		iperf -s -B "$ADDR_B" -p "$port"
	wait_for_port "$port" 15 "$BG_PID"
	bounded 60 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		iperf -c "$ADDR_B" -B "$ADDR_A" -p "$port" -t 3 -f m >out.txt 2>&1 || {
		cat out.txt >&2
		false
	}
	grep -E 'Mbits/sec' out.txt
	echo "# iperf over librsock: $(grep -oE '[0-9.]+ Mbits/sec' out.txt | tail -1)" >&3
	stats_rdma cli.log 1000000 tx
	rdma_crossed 1000
}

@test "iperf 2 -P 4: a client that opens all its streams before it uses one gets every one over RDMA, without waiting in connect()" {
	# iperf 2's client connects its 4 streams before they send; its server
	# accepts a stream only once the one before it sent its header. So
	# connect() must not wait for the hello's answer: the second connect()
	# would wait the whole handshake bound (2 s) and its stream stay on TCP.
	require_cmd iperf
	local port line t0 t1
	port=$(free_port)
	rdma_snapshot
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		iperf -s -B "$ADDR_B" -p "$port"
	wait_for_port "$port" 15 "$BG_PID"
	t0=$(date +%s%N)
	bounded 60 env RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		iperf -c "$ADDR_B" -B "$ADDR_A" -p "$port" -t 2 -P 4 -f m >out.txt 2>&1 || {
		cat out.txt >&2
		false
	}
	t1=$(date +%s%N)
	cat out.txt
	grep -q 'SUM' out.txt
	echo "# iperf -P 4 over librsock: $(grep -E 'SUM' out.txt | grep -oE '[0-9.]+ Mbits/sec' | tail -1), the run $(((t1 - t0) / 1000000)) ms" >&3
	line=$(stats_line cli.log)
	[[ "$line" == *"streams tcp=0 rdma=4 "* ]] || { echo "expected 4 RDMA streams: $line" >&2; false; }
	stats_rdma cli.log 1000000 tx
	rdma_crossed 1000
}

@test "iperf3: both directions (-R too) and -P 4 over RDMA" {
	require_cmd iperf3
	local port
	port=$(free_port)
	rdma_snapshot
	start_bg srv env $(rsock_env srv) iperf3 -s -B "$ADDR_B" -p "$port"
	wait_for_port "$port" 20 "$BG_PID"
	bounded 60 env $(rsock_env c1) iperf3 -c "$ADDR_B" -B "$ADDR_A" -p "$port" -t 2 -f m >up.txt 2>&1 ||
		{ cat up.txt >&2; false; }
	bounded 60 env $(rsock_env c2) iperf3 -c "$ADDR_B" -B "$ADDR_A" -p "$port" -t 2 -R -f m >down.txt 2>&1 ||
		{ cat down.txt >&2; false; }
	bounded 60 env $(rsock_env c3) iperf3 -c "$ADDR_B" -B "$ADDR_A" -p "$port" -t 2 -P 4 -f m >par.txt 2>&1 ||
		{ cat par.txt >&2; false; }
	grep -q 'receiver' up.txt
	grep -q 'receiver' down.txt
	grep -q 'SUM.*receiver' par.txt
	stats_rdma c1.log 1000000 tx
	stats_rdma c2.log 1000000 rx
	stats_rdma c3.log 1000000 tx
	stop_bg "$BG_PID"
	stats_rdma srv.log 3000000 rx
	rdma_crossed 1000
	echo "# iperf3 over librsock: up $(grep receiver up.txt | grep -oE '[0-9.]+ Mbits/sec'), -R $(grep receiver down.txt | grep -oE '[0-9.]+ Mbits/sec'), -P 4 $(grep 'SUM.*receiver' par.txt | grep -oE '[0-9.]+ Mbits/sec')" >&3
}

@test "sockperf (libvma's benchmark) over TCP: ping-pong, under-load and throughput against one server, over RDMA" {
	require_cmd sockperf
	local port mode
	port=$(free_port)
	start_bg srv env $(rsock_env srv) sockperf server --tcp -i "$ADDR_B" -p "$port"
	wait_for_port "$port" 30 "$BG_PID"
	for mode in "ping-pong -m 64" "under-load -m 64 --mps 2000" "throughput -m 16000"; do
		# shellcheck disable=SC2086
		run bounded 60 env $(rsock_env "cli-${mode%% *}") sockperf $mode --tcp -i "$ADDR_B" -p "$port" -t 2
		echo "$output" | grep -E 'Summary|ERROR' || true
		[ "$status" -eq 0 ]
		echo "$output" | grep -q 'Summary: '
		! echo "$output" | grep -q 'ERROR' || false
		stats_only_rdma "cli-${mode%% *}.log"
	done
}

@test "qperf tcp_bw and tcp_lat: the server accepts its data stream and leaves it alone until the client speaks on the control connection; both streams over RDMA" {
	# qperf's server reads nothing from the data stream until the client,
	# whose connect() returned, says so on the control connection. Were
	# that stream's hello answered only at the server's first use of it,
	# the client would wait out the handshake bound (2 s) and the stream
	# stay on TCP: the library answers the hello of an accepted stream
	# left unused after RSOCK_SETTLE_MS.
	require_cmd qperf
	local port dport
	port=$(free_port)
	dport=$(free_port)
	start_bg srv env $(rsock_env srv) qperf -lp "$port"
	wait_for_port "$port" 20 "$BG_PID"
	rdma_snapshot
	bounded 120 env $(rsock_env cli) qperf "$ADDR_B" -lp "$port" -ip "$dport" -t 2 tcp_bw tcp_lat >out.txt 2>&1 ||
		{ cat out.txt >&2; false; }
	grep -q 'bw *=' out.txt
	grep -q 'latency *=' out.txt
	stats_only_rdma cli.log
	stats_rdma cli.log 1000000 tx
	rdma_crossed 1000
	echo "# qperf over librsock: $(grep -h 'bw *=\|latency *=' out.txt | tr -s ' ' | tr '\n' ' ')" >&3
}

@test "nuttcp (stdio on its control connection): transmit and -r, the data connection over RDMA" {
	require_cmd nuttcp
	local cport dport
	cport=$(free_port)
	dport=$(free_port)
	# The server reads its control connection with fgets on an fdopen'd
	# descriptor (the client reads stdin after dup()): glibc reads inside
	# libc, so fdopen puts that connection on TCP (the server declines
	# RDMA and never reads the client's hello as a command); the data
	# connection is plain read()/write() and goes over RDMA.
	start_bg srv env $(rsock_env srv) nuttcp -S --nofork -P "$cport" -p "$dport"
	wait_for_port "$cport" 30 "$BG_PID"
	# nuttcp tests errno after its transfer loop ("Error: IO" when a call
	# that succeeded changed it): errnowatch names such a call.
	bounded 60 env $(rsock_env cli) ERRNOWATCH_LOG="$PWD/tx.errno" LD_PRELOAD="$(rsock_preload_watched)" \
		nuttcp -P "$cport" -p "$dport" -T 2 "$ADDR_B" >tx.txt
	bounded 60 env $(rsock_env cli2) ERRNOWATCH_LOG="$PWD/rx.errno" LD_PRELOAD="$(rsock_preload_watched)" \
		nuttcp -r -P "$cport" -p "$dport" -T 2 "$ADDR_B" >rx.txt
	grep -q Mbps tx.txt || { cat tx.txt >&2; false; }
	grep -q Mbps rx.txt || { cat rx.txt >&2; false; }
	errno_kept tx.errno rx.errno
	stats_rdma cli.log 10000000 tx
	stats_rdma cli2.log 10000000 rx
}

# ---- web servers, proxies and HTTP clients ----------------------------------

@test "curl against python3 -m http.server over RDMA: a 20 MB file, byte-exact" {
	require_cmd curl python3
	local port
	mkdir www
	rand_file www/blob 20000000
	port=$(free_port)
	rdma_snapshot
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		python3 -m http.server -b "$ADDR_B" -d www "$port"
	wait_for_port "$port" 15 "$BG_PID"
	if [ -n "${RSOCK_SAN_PRELOAD:-}" ]; then
		# curl hangs with libasan preloaded, even without librsock (see
		# test/bats/programs.bats): python3's urllib is the client then
		bounded 60 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
			python3 "$RSOCK_SRC_DIR/test/bats/fetch.py" "http://$ADDR_B:$port/blob" got
	else
		bounded 60 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
			curl -sS --max-time 50 --interface "$ADDR_A" -o got "http://$ADDR_B:$port/blob"
	fi
	same_file www/blob got "curl"
	stats_rdma cli.log 20000000 rx
	rdma_crossed 1000
}

@test "nginx: master and 2 workers (listen-then-fork, sendfile on) with wrk and curl over RDMA" {
	require_cmd nginx wrk curl
	local port
	port=$(free_port)
	mkdir -p www tmp
	rand_file www/blob 3000000
	head -c 1024 /dev/urandom >www/1k
	cat >nginx.conf <<CONF
user root;
worker_processes 2;
daemon off;
pid $PWD/nginx.pid;
error_log $PWD/error.log;
events { worker_connections 256; }
http {
	access_log off;
	sendfile on;
	client_body_temp_path $PWD/tmp; proxy_temp_path $PWD/tmp; fastcgi_temp_path $PWD/tmp;
	uwsgi_temp_path $PWD/tmp; scgi_temp_path $PWD/tmp;
	server { listen $ADDR_B:$port; root $PWD/www; }
}
CONF
	rdma_snapshot
	start_bg srv env $(rsock_env srv) nginx -c "$PWD/nginx.conf" -e "$PWD/error.log"
	wait_for_port "$port" 20 "$BG_PID"
	[ "$(pgrep -P "$(pgrep -f "nginx: master" | head -n 1)" | wc -l)" -ge 2 ]
	if [ -n "${RSOCK_SAN_PRELOAD:-}" ]; then
		bounded 60 env $(rsock_env cli) /usr/bin/python3 "$RSOCK_SRC_DIR/test/bats/fetch.py" \
			"http://$ADDR_B:$port/blob" got
	else
		# (A rare time-out here: print what there is to see, the logs
		# of both ends and nginx's, and the sockets.)
		bounded 60 env $(rsock_env cli) curl -sS -o got "http://$ADDR_B:$port/blob" || {
			echo "curl failed: $(stat -c %s got 2>/dev/null) bytes; client log, server log, nginx's log, sockets:" >&2
			cat cli.log srv.log error.log >&2
			ss -tnie >&2
			false
		}
	fi
	same_file www/blob got "GET /blob through nginx's sendfile"
	stats_only_rdma cli.log
	stats_rdma cli.log 3000000 rx
	bounded 60 env $(rsock_env wrk) wrk -t 2 -c 16 -d 3s "http://$ADDR_B:$port/1k" >wrk.txt 2>&1 ||
		{ cat wrk.txt >&2; false; }
	cat wrk.txt
	grep -qE '^Requests/sec' wrk.txt
	! grep -qE 'Non-2xx|Socket errors' wrk.txt || false
	stats_only_rdma wrk.log
	rdma_crossed 1000
	echo "# nginx + wrk over librsock: $(grep -E '^Requests/sec' wrk.txt)" >&3
}

@test "apache2 mpm_event (a listener thread in epoll_wait, workers adding kept-alive streams) with ab -k over RDMA" {
	require_cmd apache2 ab
	local port www
	port=$(free_port)
	# The document root must be readable by www-data.
	www=$(mktemp -d /tmp/rsock-apache.XXXXXX)
	chmod 755 "$www"
	head -c 20000 /dev/urandom >"$www/20k"
	chmod 644 "$www/20k"
	cat >ap.conf <<CONF
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
Listen $ADDR_B:$port
ServerName localhost
PidFile $PWD/httpd.pid
DefaultRuntimeDir $PWD
ErrorLog $PWD/error.log
User www-data
Group www-data
DocumentRoot $www
<Directory $www>
  Require all granted
</Directory>
StartServers 2
CONF
	rdma_snapshot
	start_bg srv env $(rsock_env srv) apache2 -d "$PWD" -f "$PWD/ap.conf" -DFOREGROUND
	wait_for_port "$port" 20 "$BG_PID"
	# Keep-alive: a worker hands each stream back to the listener thread,
	# which sleeps in epoll_wait: that wait goes through the library's
	# epoll, or the children take a data word of the library's for one of
	# theirs and crash.
	bounded 120 env $(rsock_env ab) ab -q -n 1000 -c 4 -k "http://$ADDR_B:$port/20k" >ab.txt 2>&1 ||
		{ cat ab.txt error.log >&2; rm -rf "$www"; false; }
	bounded 120 env $(rsock_env ab2) ab -q -n 200 -c 4 "http://$ADDR_B:$port/20k" >ab2.txt 2>&1 ||
		{ cat ab2.txt error.log >&2; rm -rf "$www"; false; }
	rm -rf "$www"
	grep -q 'Complete requests:      1000' ab.txt
	grep -q 'Failed requests:        0' ab.txt || { cat ab.txt >&2; false; }
	grep -q 'Failed requests:        0' ab2.txt || { cat ab2.txt >&2; false; }
	! grep -E 'exit signal|AH00052|AH00051' error.log || false
	stats_only_rdma ab.log
	stats_only_rdma ab2.log
	stats_rdma ab.log 20000000 rx
	rdma_crossed 1000
	echo "# apache2 mpm_event + ab -k over librsock: $(grep -E '^Requests per second' ab.txt)" >&3
}

@test "lighttpd (sendfile backend) serves two 10 MB files on one keep-alive connection to curl over RDMA" {
	require_cmd lighttpd curl
	local port
	mkdir www
	head -c 10000000 /dev/urandom >www/f
	port=$(free_port)
	cat >l.conf <<CFG
server.document-root = "$PWD/www"
server.port = $port
server.bind = "$ADDR_B"
server.network-backend = "sendfile"
CFG
	start_bg srv env $(rsock_env srv) lighttpd -D -f "$PWD/l.conf"
	wait_for_port "$port" 20 "$BG_PID"
	bounded 120 env $(rsock_env cli) curl -s --interface "$ADDR_A" -o got1 "http://$ADDR_B:$port/f" -o got2 "http://$ADDR_B:$port/f"
	same_file www/f got1 "first fetch"
	same_file www/f got2 "second fetch"
	stats_only_rdma cli.log
	stats_rdma cli.log 20000000 rx
}

@test "openssl s_server -WWW and curl over HTTPS: 10 MB over RDMA" {
	require_cmd openssl curl
	local port
	head -c 10000000 /dev/urandom >data
	bounded 60 openssl req -x509 -newkey rsa:2048 -nodes -keyout k.pem -out c.pem -days 1 -subj /CN=t 2>/dev/null
	port=$(free_port)
	start_bg srv env $(rsock_env srv) openssl s_server -WWW -accept "$ADDR_B:$port" -cert c.pem -key k.pem
	wait_for_port "$port" 20 "$BG_PID"
	bounded 120 env $(rsock_env cli) curl -sk --interface "$ADDR_A" -o got "https://$ADDR_B:$port/data"
	same_file data got "over TLS"
	stats_only_rdma cli.log
	stats_rdma cli.log 10000000 rx
}

# backend_http PORT DIR: python3's http.server (librsock) serving DIR on ADDR_A:PORT.
backend_http() {
	start_bg backend env $(rsock_env backend) python3 -m http.server --bind "$ADDR_A" --directory "$2" "$1"
	wait_for_port "$1" 20 "$BG_PID"
}

@test "varnish (thread pools, its epoll waiter) caches 10 MB from http.server: a miss, two hits, then wrk, over RDMA" {
	require_cmd varnishd curl wrk python3
	local port bport i
	mkdir www
	head -c 10000000 /dev/urandom >www/blob
	bport=$(free_port)
	backend_http "$bport" www
	port=$(free_port)
	start_bg srv env $(rsock_env srv) varnishd -F -j none -a "$ADDR_B:$port" -b "$ADDR_A:$bport" \
		-s malloc,64m -n "$PWD/varnish" -p thread_pools=2
	wait_for_port "$port" 60 "$BG_PID"
	for i in 1 2 3; do
		bounded 60 env $(rsock_env cli) curl -sS --interface "$ADDR_A" -o got "http://$ADDR_B:$port/blob"
		same_file www/blob got "fetch $i through varnish"
		stats_only_rdma cli.log
		stats_rdma cli.log 10000000 rx
	done
	# 16 connections share the guests' few MB/s, so a 10 MB reply takes
	# longer than wrk's own 2 s timeout, which would count it as an error.
	bounded 90 env $(rsock_env wrk) wrk -t 2 -c 16 -d 2s --timeout 60s "http://$ADDR_B:$port/blob" \
		>wrk.txt 2>&1 || { cat wrk.txt >&2; false; }
	grep -qE '^Requests/sec' wrk.txt
	! grep -qE 'Non-2xx|Socket errors' wrk.txt || { cat wrk.txt >&2; false; }
	stats_only_rdma wrk.log
}

@test "nghttpd and h2load: HTTP/2, 4 connections with 4 streams each, 12 x 3 MB over RDMA" {
	require_cmd nghttpd h2load
	local port
	mkdir www
	head -c 3000000 /dev/urandom >www/blob
	port=$(free_port)
	start_bg srv env $(rsock_env srv) nghttpd --no-tls -d "$PWD/www" -a "$ADDR_B" "$port"
	wait_for_port "$port" 20 "$BG_PID"
	bounded 120 env $(rsock_env cli) h2load -n 12 -c 4 -m 4 "http://$ADDR_B:$port/blob" >h2.txt 2>&1 ||
		{ cat h2.txt >&2; false; }
	cat h2.txt
	grep -q '12 succeeded' h2.txt
	grep -q 'status codes: 12 2xx' h2.txt
	stats_only_rdma cli.log
	stats_rdma cli.log 36000000 rx
}

@test "stunnel4 (TLS) in front of http.server, and tinyproxy forwarding to it: 10 MB through each, client and back-end legs on RDMA" {
	require_cmd stunnel4 tinyproxy curl openssl python3
	local bport sport pport pid
	mkdir www
	head -c 10000000 /dev/urandom >www/blob
	bport=$(free_port)
	backend_http "$bport" www
	bounded 60 openssl req -x509 -newkey rsa:2048 -nodes -keyout k.pem -out c.pem -days 1 -subj /CN=t 2>/dev/null
	sport=$(free_port)
	printf 'foreground = yes\npid =\n[h]\naccept = %s:%s\nconnect = %s:%s\ncert = %s/c.pem\nkey = %s/k.pem\n' \
		"$ADDR_B" "$sport" "$ADDR_A" "$bport" "$PWD" "$PWD" >st.conf
	start_bg stunnel env $(rsock_env stunnel) stunnel4 "$PWD/st.conf"
	pid=$BG_PID
	wait_for_port "$sport" 20 "$pid"
	bounded 60 env $(rsock_env cli) curl -sS -k --interface "$ADDR_A" -o got "https://$ADDR_B:$sport/blob"
	same_file www/blob got "HTTPS through stunnel4"
	stats_only_rdma cli.log
	stats_rdma cli.log 10000000 rx
	# stunnel4 exits cleanly on SIGTERM: its counters cover both legs.
	kill -TERM "$pid"
	wait_bg "$pid" 20 || true
	stats_only_rdma stunnel.log
	stats_rdma stunnel.log 10000000 rx
	pport=$(free_port)
	printf 'Port %s\nListen %s\nAllow %s\nMaxClients 20\nLogLevel Error\n' "$pport" "$ADDR_B" "$ADDR_A" >tp.conf
	start_bg tinyproxy env $(rsock_env tinyproxy) tinyproxy -d -c "$PWD/tp.conf"
	pid=$BG_PID
	wait_for_port "$pport" 20 "$pid"
	bounded 60 env $(rsock_env cli2) curl -sS --interface "$ADDR_A" -x "http://$ADDR_B:$pport" \
		-o got2 "http://$ADDR_A:$bport/blob"
	same_file www/blob got2 "HTTP through tinyproxy"
	stats_only_rdma cli2.log
	stats_rdma cli2.log 10000000 rx
	kill -TERM "$pid"
	wait_bg "$pid" 20 || true
	stats_only_rdma tinyproxy.log
	stats_rdma tinyproxy.log 10000000 rx
}

@test "gunicorn -w 2 (pre-fork workers) answers two 10 MB requests over RDMA" {
	require_cmd gunicorn curl
	local port
	head -c 10000000 /dev/urandom >blob
	cat >app.py <<'PY'
import os
blob = open(os.environ["BLOB"], "rb").read()
def app(env, start):
    start("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(blob)))])
    return [blob]
PY
	port=$(free_port)
	start_bg srv env BLOB="$PWD/blob" $(rsock_env srv) gunicorn -w 2 -b "$ADDR_B:$port" --chdir "$PWD" app:app
	wait_for_port "$port" 30 "$BG_PID"
	bounded 60 env $(rsock_env cli) curl -sS --interface "$ADDR_A" -o got1 "http://$ADDR_B:$port/" -o got2 "http://$ADDR_B:$port/"
	same_file blob got1 "first request"
	same_file blob got2 "second request"
	stats_only_rdma cli.log
	stats_rdma cli.log 20000000 rx
}

@test "haproxy (tcp mode, splice-auto) in front of an echo server: three 10 MB round trips through two RDMA streams each" {
	# splice() on a non-blocking RDMA stream hands it to TCP first; the
	# kick that wakes the epoll instances must not reach haproxy as an
	# event of its own once no RDMA stream is left (haproxy crashes on it).
	require_cmd haproxy socat
	local fport bport
	head -c 10000000 /dev/urandom >data
	bport=$(free_port)
	start_bg be env $(rsock_env be) socat "TCP4-LISTEN:$bport,bind=$ADDR_A,reuseaddr,fork" EXEC:cat
	wait_for_port "$bport" 20 "$BG_PID"
	fport=$(free_port)
	cat >hap.cfg <<CFG
global
  maxconn 100
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend f
  bind $ADDR_B:$fport
  option splice-auto
  default_backend b
backend b
  server s1 $ADDR_A:$bport
CFG
	start_bg hap env $(rsock_env hap) haproxy -db -f hap.cfg
	wait_for_port "$fport" 20 "$BG_PID"
	for i in 1 2 3; do
		bounded 120 env $(rsock_env "cli$i") socat -t 30 - "TCP4:$ADDR_B:$fport,bind=$ADDR_A" <data >"got$i"
		same_file data "got$i" "round trip $i through haproxy"
		stats_only_rdma "cli$i.log"
	done
	kill -0 "$BG_PID" # haproxy is still there
}

# ---- data stores ------------------------------------------------------------

# rps FILE: redis-benchmark -q's final figures, on one line.
rps() {
	tr '\r' '\n' <"$1" | grep -oE '^(SET|GET): [0-9.]+ requests per second' | tr '\n' ' '
}

@test "redis: redis-server with redis-cli and redis-benchmark (-P 16 too) over RDMA" {
	require_cmd redis-server redis-cli redis-benchmark
	local port
	port=$(free_port)
	rdma_snapshot
	start_bg srv env $(rsock_env srv) redis-server --port "$port" --bind "$ADDR_B" --save '' \
		--appendonly no --protected-mode no --dir "$PWD"
	wait_for_port "$port" 20 "$BG_PID"
	run bounded 30 env $(rsock_env cli) redis-cli -h "$ADDR_B" -p "$port" SET greeting "over rdma"
	[ "$output" = OK ]
	run bounded 30 env $(rsock_env cli2) redis-cli -h "$ADDR_B" -p "$port" GET greeting
	[ "$output" = "over rdma" ]
	stats_rdma cli2.log 9 rx
	bounded 120 env $(rsock_env bench) redis-benchmark -h "$ADDR_B" -p "$port" -t set,get -n 3000 \
		-c 8 -q >bench.txt 2>&1 || { cat bench.txt >&2; false; }
	bounded 120 env $(rsock_env bench16) redis-benchmark -h "$ADDR_B" -p "$port" -t set,get \
		-n 20000 -c 8 -P 16 -q >bench16.txt 2>&1 || { cat bench16.txt >&2; false; }
	grep -q 'GET: ' bench16.txt
	run bounded 30 env $(rsock_env cli3) redis-cli -h "$ADDR_B" -p "$port" DBSIZE
	[ "$output" -ge 1 ]
	stop_bg "$BG_PID"
	stats_rdma srv.log 10000 rx
	stats_rdma bench.log 10000 tx
	stats_rdma bench16.log 10000 tx
	stats_only_rdma bench.log
	stats_only_rdma bench16.log
	rdma_crossed 1000
	echo "# redis-benchmark over librsock: $(rps bench.txt), with -P 16: $(rps bench16.txt)" >&3
}

@test "redis replication: a replica takes the master's snapshot of 10,000 keys (diskless, about 19 MB) and its later writes over one RDMA stream, digests equal" {
	require_cmd redis-server redis-cli
	local mport rport mpid rpid i dm dr
	mport=$(free_port)
	rport=$(free_port)
	start_bg master env $(rsock_env master) redis-server --port "$mport" --bind "$ADDR_B" --save '' \
		--appendonly no --protected-mode no --enable-debug-command yes \
		--repl-diskless-sync yes --repl-diskless-sync-delay 0 --dir "$PWD"
	mpid=$BG_PID
	wait_for_port "$mport" 20 "$mpid"
	# 10,000 keys of 2,000 bytes, loaded over TCP (redis-cli is not preloaded)
	python3 -c '
import os, sys
v = os.urandom(1000).hex().encode()
sys.stdout.buffer.write(b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
    % (len(b"key:%d" % i), b"key:%d" % i, len(v), v) for i in range(10000)))' >load.resp
	bounded 60 redis-cli -h "$ADDR_B" -p "$mport" --pipe <load.resp
	mkdir replica
	start_bg replica env $(rsock_env replica) redis-server --port "$rport" --bind "$ADDR_A" --save '' \
		--appendonly no --protected-mode no --enable-debug-command yes \
		--replicaof "$ADDR_B" "$mport" --dir "$PWD/replica"
	rpid=$BG_PID
	wait_for_port "$rport" 20 "$rpid"
	for i in $(seq 1 120); do
		bounded 10 redis-cli -h "$ADDR_A" -p "$rport" info replication | grep -q 'master_link_status:up' && break
		sleep 0.5
	done
	for i in $(seq 1 100); do echo "SET live:$i v$i"; done | bounded 30 redis-cli -h "$ADDR_B" -p "$mport" >/dev/null
	for i in $(seq 1 60); do
		dm=$(bounded 10 redis-cli -h "$ADDR_B" -p "$mport" debug digest)
		dr=$(bounded 10 redis-cli -h "$ADDR_A" -p "$rport" debug digest)
		[ "$dm" = "$dr" ] && break
		sleep 0.5
	done
	echo "master $dm replica $dr"
	[ "$dm" = "$dr" ]
	[ "$(bounded 10 redis-cli -h "$ADDR_A" -p "$rport" dbsize)" = 10100 ]
	stop_bg "$rpid"
	stop_bg "$mpid"
	# the replica's one stream of its own, to its master: the snapshot and the writes
	stats_rdma replica.log 15000000 rx
	stats_rdma master.log 15000000 tx
}

@test "redis BGSAVE: a forked child that never touches the sockets leaves the parent's RDMA streams intact" {
	require_cmd redis-server redis-cli
	local port pid
	port=$(free_port)
	start_bg srv env $(rsock_env srv) redis-server --port "$port" --bind "$ADDR_B" --save '' \
		--appendonly no --protected-mode no --dir "$PWD" --dbfilename dump.rdb
	wait_for_port "$port" 20 "$BG_PID"
	bounded 30 env $(rsock_env fill) redis-cli -h "$ADDR_B" -p "$port" DEBUG POPULATE 20000 >/dev/null
	# One connection, 300 increments over about 3 s, while the server forks
	# three BGSAVE children.
	env $(rsock_env inc) redis-cli -h "$ADDR_B" -p "$port" -r 300 -i 0.01 INCR counter >inc.txt 2>&1 &
	pid=$!
	for i in 1 2 3; do
		sleep 0.7
		run bounded 30 env $(rsock_env "bg$i") redis-cli -h "$ADDR_B" -p "$port" BGSAVE
		[[ "$output" == *"Background saving started"* || "$output" == *"already in progress"* ]]
	done
	wait "$pid"
	[ "$(tail -n 1 inc.txt)" = 300 ]
	run bounded 30 env $(rsock_env get) redis-cli -h "$ADDR_B" -p "$port" GET counter
	[ "$output" = 300 ]
	[ -s dump.rdb ]
	stats_only_rdma inc.log
	stats_rdma inc.log 1000 tx
}

@test "memcached -t 4 with memcslap over RDMA" {
	require_cmd memcached memcslap
	local port
	port=$(free_port)
	rdma_snapshot
	start_bg srv env $(rsock_env srv) memcached -t 4 -l "$ADDR_B" -p "$port" -U 0 -u nobody
	wait_for_port "$port" 20 "$BG_PID"
	bounded 120 env $(rsock_env cli) memcslap --servers="$ADDR_B:$port" --concurrency=8 \
		--execute-number=2000 >slap.txt 2>&1 || { cat slap.txt >&2; false; }
	cat slap.txt
	grep -qE 'Time to set +16000 keys' slap.txt
	stats_rdma cli.log 10000 tx
	stats_only_rdma cli.log
	stop_bg "$BG_PID"
	stats_rdma srv.log 10000 rx
	rdma_crossed 1000
	echo "# memcslap over librsock: $(grep -oE 'Time to set.*' slap.txt | tr -s ' ')" >&3
}

@test "PostgreSQL (fork-after-accept backends) with pgbench -c 4 over RDMA" {
	local bin=/usr/lib/postgresql/15/bin port
	[ -x "$bin/postgres" ] || bin=$(dirname "$(command -v postgres || echo /x/y)")
	[ -x "$bin/postgres" ] || { echo "postgres is not installed" >&2; false; }
	require_cmd pgbench runuser
	port=$(free_port)
	pg_cluster "$bin"
	echo "host all all 0.0.0.0/0 trust" >>"$PG/data/pg_hba.conf"
	rdma_snapshot
	start_bg srv runuser -u postgres -- env RSOCK_STATS=1 RSOCK_LOG_FILE="$PG/srv.log" \
		LD_PRELOAD="$(rsock_preload_value)" "$bin/postgres" -D "$PG/data" \
		-h "$ADDR_B" -p "$port" -k "$PG" -c fsync=off
	wait_for_port "$port" 30 "$BG_PID"
	bounded 120 env $(rsock_env init) pgbench -h "$ADDR_B" -p "$port" -U postgres -i -s 1 postgres >init.txt 2>&1 ||
		{ cat init.txt srv.err >&2; false; }
	# (40 transactions, not 3 s: the bytes asserted below, about 480 a
	# transaction, do not depend on the host's speed)
	bounded 120 env $(rsock_env pgb) pgbench -h "$ADDR_B" -p "$port" -U postgres -c 4 -t 10 postgres >pgb.txt 2>&1 ||
		{ cat pgb.txt srv.err >&2; false; }
	cat pgb.txt
	grep -qE 'number of failed transactions: 0|tps = ' pgb.txt
	stats_only_rdma pgb.log
	stats_rdma pgb.log 10000 tx
	rdma_crossed 1000
	echo "# pgbench -c 4 over librsock: $(grep -oE 'tps = [0-9.]+' pgb.txt | tail -1)" >&3
	stop_bg "$BG_PID"
	rm -rf "$PG"
}

@test "MariaDB (a thread per connection) with mysqlslap -c 8 and a 4 MB result over RDMA" {
	require_cmd mariadbd mariadb-install-db mysqlslap mariadb
	local port
	port=$(free_port)
	bounded 120 mariadb-install-db --no-defaults --datadir="$PWD/db" --user=root \
		--auth-root-authentication-method=normal >install.txt 2>&1 || { cat install.txt >&2; false; }
	start_bg srv env $(rsock_env srv) mariadbd --no-defaults --datadir="$PWD/db" --socket="$PWD/my.sock" \
		--port="$port" --bind-address="$ADDR_B" --user=root --skip-grant-tables --pid-file="$PWD/my.pid"
	wait_for_port "$port" 60 "$BG_PID"
	bounded 120 env $(rsock_env slap) mysqlslap --protocol=tcp -h "$ADDR_B" -P "$port" -u root \
		--concurrency=8 --iterations=2 --number-of-queries=1000 --auto-generate-sql \
		--auto-generate-sql-load-type=mixed >slap.txt 2>&1 || { cat slap.txt >&2; false; }
	grep -q 'Average number of seconds' slap.txt
	stats_only_rdma slap.log
	echo "select sha2(repeat('x', 1000000), 256), length(repeat('y', 4000000)), repeat('z', 4000000);" >q.sql
	bounded 60 env $(rsock_env cli) mariadb --protocol=tcp -h "$ADDR_B" -P "$port" -u root -N \
		--max-allowed-packet=64M <q.sql >q.txt
	# sha2 of a million x's, then 4,000,000 and the 4 MB column.
	[ "$(cut -f1,2 q.txt)" = "$(printf '%s\t4000000' "$(head -c 1000000 /dev/zero | tr '\0' x | sha256sum | cut -d' ' -f1)")" ]
	[ "$(cut -f3 q.txt | tr -d '\n' | wc -c)" = 4000000 ]
	stats_only_rdma cli.log
	stats_rdma cli.log 4000000 rx
}

# ---- daemons ----------------------------------------------------------------

@test "rsync daemon (its child sets uid and gid after accepting): push and pull over librsock, trees equal" {
	require_cmd rsync
	local port
	mkdir src dst
	for i in $(seq 1 12); do head -c $((i * 40000)) /dev/urandom >"src/f$i"; done
	printf 'uid = root\ngid = root\nuse chroot = no\n[m]\npath = %s/dst\nread only = no\n' "$PWD" >rs.conf
	port=$(free_port)
	start_bg srv env $(rsock_env srv) rsync --daemon --no-detach --port "$port" --address "$ADDR_B" --config "$PWD/rs.conf"
	wait_for_port "$port" 20 "$BG_PID"
	bounded 60 env $(rsock_env push) rsync -a --address="$ADDR_A" src/ "rsync://$ADDR_B:$port/m/"
	diff -r src dst
	bounded 60 env $(rsock_env pull) rsync -a --address="$ADDR_A" "rsync://$ADDR_B:$port/m/" back/
	diff -r src back
	# each stream began on RDMA and moved to TCP when the daemon's child
	# changed its credentials
	stats_rdma push.log 1 tx
	grep -qE 'stats: .* handovers=1' push.log
}

@test "sshd (re-exec, privilege separation, seccomp sandbox) serves ssh, with the library logging to a file" {
	# The sandboxed child forbids files to grow (RLIMIT_FSIZE 0) and kills
	# itself on most system calls: a stats line written to the log file at
	# its exit would end it (SIGXFSZ), and the connection with it.
	require_cmd ssh ssh-keygen
	[ -x /usr/sbin/sshd ] || { echo "/usr/sbin/sshd is not installed (openssh-server)" >&2; return 1; }
	local port
	mkdir -p /run/sshd
	ssh-keygen -q -t ed25519 -N '' -f hostkey
	ssh-keygen -q -t ed25519 -N '' -f userkey
	cp userkey.pub authorized
	head -c 2000000 /dev/urandom >data
	port=$(free_port)
	start_bg srv env $(rsock_env srv) /usr/sbin/sshd -D -e -f /dev/null -p "$port" -o ListenAddress="$ADDR_B" \
		-h "$PWD/hostkey" -o PidFile=none -o UsePAM=no -o AuthorizedKeysFile="$PWD/authorized" \
		-o StrictModes=no -o PermitRootLogin=yes
	wait_for_port "$port" 20 "$BG_PID"
	bounded 60 env $(rsock_env cli) ssh -b "$ADDR_A" -i userkey -p "$port" -o StrictHostKeyChecking=no \
		-o UserKnownHostsFile=/dev/null -o BatchMode=yes "root@$ADDR_B" sha256sum <data >out 2>ssh.err || {
		cat ssh.err srv.out srv.err >&2 2>/dev/null
		false
	}
	[ "$(cut -d' ' -f1 out)" = "$(sha256sum <data | cut -d' ' -f1)" ]
	stats_line cli.log
}

@test "unbound answers dig +tcp over RDMA (dig binds 0.0.0.0:0 before it connects)" {
	require_cmd unbound dig
	local port
	port=$(free_port)
	# No privilege drop, chroot or daemon: the test's own unbound.
	cat >ub.conf <<CONF
server:
  interface: $ADDR_B@$port
  port: $port
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "$PWD"
  pidfile: ""
  use-syslog: no
  logfile: ""
  access-control: 0.0.0.0/0 allow
  do-ip6: no
  local-zone: "rsock.test." static
  local-data: "a.rsock.test. IN A 10.1.2.3"
  local-data: "b.rsock.test. IN A 10.1.2.4"
remote-control:
  control-enable: no
CONF
	start_bg srv env $(rsock_env srv) unbound -d -c ub.conf
	wait_for_port "$port" 30 "$BG_PID"
	bounded 30 env $(rsock_env cli) dig +tcp +tries=1 +time=5 +short @"$ADDR_B" -p "$port" a.rsock.test >got1
	bounded 30 env $(rsock_env cli2) dig +tcp +keepopen +tries=1 +time=5 +short @"$ADDR_B" -p "$port" \
		a.rsock.test b.rsock.test >got2
	[ "$(cat got1)" = 10.1.2.3 ] || { cat got1 srv.out srv.err >&2; false; }
	[ "$(tr '\n' ' ' <got2)" = "10.1.2.3 10.1.2.4 " ] || { cat got2 >&2; false; }
	stats_only_rdma cli.log
	stats_only_rdma cli2.log
}

@test "mosquitto with mosquitto_sub and mosquitto_pub: 200 messages in order over RDMA" {
	require_cmd mosquitto mosquitto_sub mosquitto_pub
	local port sub
	port=$(free_port)
	printf 'listener %s %s\nallow_anonymous true\n' "$port" "$ADDR_B" >m.conf
	start_bg srv env $(rsock_env srv) mosquitto -c "$PWD/m.conf"
	wait_for_port "$port" 20 "$BG_PID"
	timeout 30 env $(rsock_env sub) mosquitto_sub -h "$ADDR_B" -p "$port" -t t -C 200 >got &
	sub=$!
	sleep 1
	seq 200 | bounded 30 env $(rsock_env pub) mosquitto_pub -h "$ADDR_B" -p "$port" -t t -l
	wait "$sub"
	seq 200 | diff - got
	stats_only_rdma sub.log
	stats_only_rdma pub.log
}

# ---- runtimes and event loops -----------------------------------------------

@test "socat: a forking TCP-LISTEN server with EXEC:cat echoes 10 MB over RDMA (select, fork after accept)" {
	require_cmd socat
	local port
	head -c 10000000 /dev/urandom >data
	port=$(free_port)
	start_bg srv env $(rsock_env srv) socat "TCP4-LISTEN:$port,bind=$ADDR_B,reuseaddr,fork" EXEC:cat
	wait_for_port "$port" 20 "$BG_PID"
	bounded 120 env $(rsock_env cli) socat -t 20 - "TCP4:$ADDR_B:$port,bind=$ADDR_A" <data >got
	same_file data got "socat echo"
	stats_rdma cli.log 10000000 tx
	stats_rdma cli.log 10000000 rx
}

@test "rsock-stat: an RDMA stream shows on path rdma with its device, QP number and ring sizes" {
	require_cmd python3
	local pair=$RSOCK_SRC_DIR/test/bats/statpair.py stat=$RSOCK_BUILD_DIR/tools/rsock-stat i cli srv
	export STATPAIR_SERVER=$ADDR_B STATPAIR_CLIENT=$ADDR_A
	start_bg srv env $(rsock_env srv) python3 "$pair" server . srv 300000 200000
	for i in $(seq 300); do [ -s srv.port ] && break; sleep 0.1; done
	start_bg cli env $(rsock_env cli) python3 "$pair" client . cli "$(cat srv.port)" 300000 200000
	for i in $(seq 600); do [ -s srv.ready ] && [ -s cli.ready ] && break; sleep 0.1; done
	cli=$(cat cli.ready)
	srv=$(cat srv.ready)
	run "$stat"
	echo "$output"
	[ "$status" -eq 0 ]
	grep -E " rdma " <<<"$output" | sed 's/^/# /' >&3
	[[ "$output" =~ \ rdma\ +established\ +300000\ +200000\ dev=[a-z][^\ ]*\ qpn=[1-9][0-9]*\ rings=[1-9][0-9]*/[1-9][0-9]*/[1-9][0-9]*\ credits= ]]
	run "$stat" -j
	[ "$status" -eq 0 ]
	echo "$output" >out.json
	python3 - "$cli" "$srv" <<'EOF'
import json, sys
objs = [json.loads(l) for l in open("out.json") if l.strip()]
for pid, tx, rx in ((int(sys.argv[1]), 300000, 200000), (int(sys.argv[2]), 200000, 300000)):
    o = [o for o in objs if o["pid"] == pid]
    assert len(o) == 1, (pid, objs)
    o = o[0]
    assert o["path"] == "rdma" and o["fallback"] is None, o
    assert o["device"] and o["qpn"] > 0, o
    assert o["rx_ring"] > 0 and o["tx_ring"] > 0 and o["peer_ring"] > 0, o
    assert o["tx_bytes"] == tx and o["rx_bytes"] == rx, o
EOF
	run "$stat" -s -j -p "$cli"
	echo "$output"
	[[ "$output" == *'"streams_rdma":1'* ]]
	[[ "$output" == *'"tx_bytes_rdma":300000'* ]]
	touch stop
	for i in $(seq 100); do [ -e "/dev/shm/rsock-$cli" ] || break; sleep 0.1; done
	[ ! -e "/dev/shm/rsock-$cli" ]
	stop_all_bg
	stats_only_rdma cli.log
	stats_only_rdma srv.log
}

@test "ncat --broker relays a line from one RDMA client to another (select on a stream not used yet)" {
	require_cmd ncat
	local port c2
	port=$(free_port)
	start_bg srv env $(rsock_env srv) ncat -l "$ADDR_B" "$port" --broker
	wait_for_port "$port" 20 "$BG_PID"
	timeout 15 env $(rsock_env c2) ncat --recv-only -s "$ADDR_A" "$ADDR_B" "$port" >got 2>c2.err &
	c2=$!
	sleep 1
	(sleep 1; echo hello-broker; sleep 2) | bounded 30 env $(rsock_env c1) ncat -s "$ADDR_A" "$ADDR_B" "$port" >/dev/null
	stop_all_bg
	wait "$c2" || true
	grep -qx hello-broker got
	stats_rdma c2.log 13 rx
}

@test "python3 asyncio: 20 concurrent streams echoed (epoll, non-blocking connect), byte-exact over RDMA" {
	require_cmd python3
	local port
	cat >srv.py <<'PY'
import asyncio, sys
async def h(r, w):
    while True:
        d = await r.read(65536)
        if not d:
            break
        w.write(d)
        await w.drain()
    w.close()
async def main():
    s = await asyncio.start_server(h, sys.argv[1], int(sys.argv[2]))
    async with s:
        await s.serve_forever()
asyncio.run(main())
PY
	cat >cli.py <<'PY'
import asyncio, os, sys
async def one(i):
    r, w = await asyncio.open_connection(sys.argv[1], int(sys.argv[2]), local_addr=(sys.argv[3], 0))
    blob = os.urandom(200000 + i * 1000)
    async def rd():
        got = bytearray()
        while len(got) < len(blob):
            d = await r.read(100000)
            if not d:
                break
            got += d
        return bytes(got)
    t = asyncio.create_task(rd())
    for k in range(0, len(blob), 7001):
        w.write(blob[k:k + 7001])
        await w.drain()
    got = await t
    w.write_eof()
    eof = await r.read()
    w.close()
    return got == blob and eof == b''
async def main():
    res = await asyncio.gather(*[one(i) for i in range(20)])
    print("ok", sum(res))
asyncio.run(main())
PY
	port=$(free_port)
	start_bg srv env $(rsock_env srv) python3 srv.py "$ADDR_B" "$port"
	wait_for_port "$port" 30 "$BG_PID"
	run bounded 120 env $(rsock_env cli) python3 cli.py "$ADDR_B" "$port" "$ADDR_A"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "ok 20" ]
	stats_only_rdma cli.log
}

@test "node: Node's http server and client (libuv: epoll, non-blocking connect, writev), 16 x 2 MB over 4 keep-alive RDMA streams, byte-exact" {
	require_cmd node
	local port
	port=$(free_port)
	start_bg srv env $(rsock_env srv) node "$BATS_TEST_DIRNAME/nodehttp.js" srv "$ADDR_B" "$port" 16
	wait_for_port "$port" 30 "$BG_PID"
	run bounded 120 env $(rsock_env cli) node "$BATS_TEST_DIRNAME/nodehttp.js" cli "$ADDR_B" "$port" 16
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "intact 16 of 16" ]
	wait_bg "$BG_PID" 30
	cat srv.out
	[ ! -s srv.out ]
	stats_only_rdma cli.log
	stats_only_rdma srv.log
}

@test "erlang: the BEAM's own I/O (active-once mode, a writer process per socket) echoes 4 x 3 MB at once over RDMA" {
	require_cmd erl erlc
	local port
	head -c 3000000 /dev/urandom >data
	erlc -o . "$BATS_TEST_DIRNAME/rsock_echo.erl"
	port=$(free_port)
	start_bg srv env $(rsock_env srv) erl -noshell -pa . -s rsock_echo srv "$ADDR_B" "$port" 4
	wait_for_port "$port" 60 "$BG_PID"
	run bounded 120 env $(rsock_env cli) erl -noshell -pa . -s rsock_echo cli "$ADDR_B" "$port" "$ADDR_A" data 4
	echo "$output"
	[ "$status" -eq 0 ] && [ "$output" = "intact 4 of 4" ] || pair_failed
	wait_bg "$BG_PID" 30
	stats_only_rdma cli.log
	stats_rdma cli.log 12000000 rx
	stats_only_rdma srv.log
}

@test "java: the JDK's NIO server (Selector on epoll) and blocking Sockets, transferTo (sendfile), gathering and scattering NIO, SO_TIMEOUT and a close under a blocked read, as over kernel TCP, over RDMA" {
	require_cmd java javac
	local port want
	head -c 1000000 /dev/urandom >data
	javac -d . "$BATS_TEST_DIRNAME/JavaEcho.java"
	want=$(printf '%s\n' "conn 0 got 1048576 intact" "conn 1 got 1048576 intact" \
		"conn 2 got 1048576 intact" "conn 3 got 1048576 intact" "nio conn intact" \
		"read before the peer's close: timed out" "read at the peer's close: -1" \
		"connect after server close: ConnectException" \
		"blocked read: SocketException Socket closed" "reader woken")
	port=$(free_port)
	start_bg srv env $(rsock_env srv) java -cp . JavaEcho server "$ADDR_B" "$port" 5
	wait_for_port "$port" 60 "$BG_PID"
	run bounded 240 env $(rsock_env cli) java -cp . JavaEcho client "$ADDR_B" "$port" 4 1 data
	echo "$output"
	[ "$status" -eq 0 ] && [ "$output" = "$want" ] || pair_failed
	wait_bg "$BG_PID" 60
	grep -qx "server done 5" srv.out
	# eight streams over RDMA (both ends of the one to its own listener);
	# the connect refused at the end counts on TCP
	grep -q 'streams tcp=1 rdma=8 ' cli.log || { grep stats: cli.log; false; }
	stats_rdma cli.log $((4 * 1048576 + 2000000)) rx
	stats_only_rdma srv.log
}

@test "zeromq (libzmq's I/O thread): REQ/REP and PUSH/PULL, 50 requests and 400 messages over two RDMA streams" {
	/usr/bin/python3 -c 'import zmq' || { echo "python3-zmq is not installed" >&2; false; }
	local port
	port=$(free_port)
	start_bg srv env $(rsock_env srv) /usr/bin/python3 "$BATS_TEST_DIRNAME/zmqpair.py" srv "$ADDR_B" "$port"
	wait_for_port "$((port + 1))" 30 "$BG_PID"
	run bounded 120 env $(rsock_env cli) /usr/bin/python3 "$BATS_TEST_DIRNAME/zmqpair.py" cli "$ADDR_B" "$port" "$ADDR_A"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(sed -n 1p <<<"$output")" = "req ok 50 of 50" ]
	wait_bg "$BG_PID" 30
	cat srv.out
	[ "$(sed -n 2p <<<"$output")" = "$(grep '^pull' srv.out | sed 's/^pull/push/')" ]
	stats_only_rdma cli.log
	stats_rdma cli.log 10000000 tx
}

@test "ruby threads (a writer and a reader per socket, each waiting in poll) echo 4 x 3 MB over RDMA" {
	require_cmd ruby
	local port
	head -c 3000000 /dev/urandom >data
	cat >echo.rb <<'RB'
require 'socket'; require 'digest'
mode, host, port = ARGV
if mode == 'server'
  srv = TCPServer.new(host, port.to_i)
  loop { Thread.new(srv.accept) { |c| while (b = c.readpartial(65536) rescue nil); c.write(b); end; c.close } }
else
  data = File.binread('data'); ok = 0
  want = Digest::SHA256.digest(data) # (loaded before the threads: its autoload is not thread-safe)
  4.times.map { Thread.new {
    s = TCPSocket.new(host, port.to_i)
    w = Thread.new { s.write(data); s.close_write }
    got = s.read; w.join
    ok += 1 if Digest::SHA256.digest(got) == want } }.each(&:join)
  puts "#{ok} of 4 echoes intact"
  exit(ok == 4 ? 0 : 1)
end
RB
	port=$(free_port)
	start_bg srv env $(rsock_env srv) ruby echo.rb server "$ADDR_B" "$port"
	wait_for_port "$port" 30 "$BG_PID"
	run bounded 60 env $(rsock_env cli) ruby echo.rb client "$ADDR_B" "$port"
	echo "$output"
	[ "$status" -eq 0 ]
	stats_only_rdma cli.log
	stats_rdma cli.log 12000000 rx
}
