#!/usr/bin/env bats
# More unmodified programs over RDMA (doc/design.md sections 6 and 12): each
# moves checked bytes between the guest's two RDMA addresses with librsock on
# both ends, and librsock's counters say RDMA carried them. Each was found
# broken or checked by hand once; here they stay checked.

load ../bats/helpers
load rsock

setup_file() {
	require_build
	require_rdma_env
}

setup() {
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	stop_all_bg
}

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

@test "erlang: the BEAM's own I/O (active mode, a writer process per socket) echoes 4 x 3 MB at once over RDMA" {
	require_cmd erl erlc
	local port
	head -c 3000000 /dev/urandom >data
	erlc -o . "$BATS_TEST_DIRNAME/rsock_echo.erl"
	port=$(free_port)
	start_bg srv env $(rsock_env srv) erl -noshell -pa . -s rsock_echo srv "$ADDR_B" "$port" 4
	wait_for_port "$port" 60 "$BG_PID"
	run bounded 120 env $(rsock_env cli) erl -noshell -pa . -s rsock_echo cli "$ADDR_B" "$port" "$ADDR_A" data 4
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "intact 4 of 4" ]
	wait_bg "$BG_PID" 30
	stats_only_rdma cli.log
	stats_rdma cli.log 12000000 rx
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

@test "haproxy (tcp mode, splice-auto) in front of an echo server: three 10 MB round trips through two RDMA streams each" {
	# splice() on a non-blocking RDMA stream hands it to TCP first; the
	# kick that wakes the epoll instances was then handed to haproxy as an
	# event of its own once no RDMA stream was left, and it crashed on it.
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
	bounded 60 env $(rsock_env wrk) wrk -t 2 -c 16 -d 2s "http://$ADDR_B:$port/blob" >wrk.txt 2>&1 ||
		{ cat wrk.txt >&2; false; }
	grep -qE '^Requests/sec' wrk.txt
	! grep -qE 'Non-2xx|Socket errors' wrk.txt || false
	stats_only_rdma wrk.log
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

@test "qperf tcp_bw and tcp_lat: the server accepts its data stream and leaves it alone until the client speaks on the control connection; both streams over RDMA" {
	# qperf's server reads nothing from the data stream until the client,
	# whose connect() returned, says so on the control connection. The
	# hello of that stream waited for its first use, and the client's
	# connect() for the hello's answer: after the handshake bound (2 s)
	# the stream stayed on TCP. An accepted stream left unused now has
	# its hello answered by the library after RSOCK_SETTLE_MS.
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
	bounded 60 env $(rsock_env cli) nuttcp -P "$cport" -p "$dport" -T 2 "$ADDR_B" >tx.txt
	bounded 60 env $(rsock_env cli2) nuttcp -r -P "$cport" -p "$dport" -T 2 "$ADDR_B" >rx.txt
	grep -q Mbps tx.txt || { cat tx.txt >&2; false; }
	grep -q Mbps rx.txt || { cat rx.txt >&2; false; }
	stats_rdma cli.log 10000000 tx
	stats_rdma cli2.log 10000000 rx
}
