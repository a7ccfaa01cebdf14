#!/usr/bin/env bats
# Readiness and processes over RDMA (doc/design.md section 10): epoll, poll
# and select on RDMA streams give exactly kernel TCP's events, and unmodified
# event-driven servers carry their bytes over RDMA.

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

@test "evcheck: epoll, poll and select events over RDMA are kernel TCP's" {
	differential evcheck
}

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
		# (Once in about 100 runs this timed out, not reproduced since:
		# leave what there is to see.)
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
	# which sleeps in epoll_wait (the children crashed on a data word of
	# ours, 3 to 6 times a run, before that wait passed through epoll.c).
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

@test "listen then fork at once (as nginx starts its workers): every child starts threads of its own and listens" {
	# Under ASan, a child forked while the library's new thread was still in
	# its start-up code inherited the allocator's lock held, and its own
	# threads hung (70 of 100 rounds before the fix, an nginx worker 1 run in 8).
	bounded 600 env RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/fs.log" LD_PRELOAD="$(rsock_preload_value)" \
		"$PROGS/forkstart" "$ADDR_B" 40 >fs.txt 2>&1 || {
		cat fs.txt >&2
		false
	}
	grep -q '^forkstart: 40 of 40 rounds$' fs.txt
	# each round's process and its child had a beacon (the thread ran)
	[ "$(grep -c 'beacon up on port' fs.log)" -eq 80 ] || {
		grep -v 'rules say' fs.log | tail -20 >&2
		false
	}
}

@test "PostgreSQL (fork-after-accept backends) with pgbench -c 4 over RDMA" {
	local bin=/usr/lib/postgresql/15/bin port
	[ -x "$bin/postgres" ] || bin=$(dirname "$(command -v postgres || echo /x/y)")
	[ -x "$bin/postgres" ] || { echo "postgres is not installed" >&2; false; }
	require_cmd pgbench runuser
	port=$(free_port)
	# The server runs as postgres: its files live where that user can reach.
	PG=$(mktemp -d /tmp/rsock-pg.XXXXXX)
	chmod 755 "$PG"
	chown postgres "$PG"
	touch "$PG/srv.log"
	chown postgres "$PG/srv.log"
	bounded 120 runuser -u postgres -- "$bin/initdb" -D "$PG/data" -A trust -U postgres >initdb.txt 2>&1 ||
		{ cat initdb.txt >&2; false; }
	echo "host all all 0.0.0.0/0 trust" >>"$PG/data/pg_hba.conf"
	rdma_snapshot
	start_bg srv runuser -u postgres -- env RSOCK_STATS=1 RSOCK_LOG_FILE="$PG/srv.log" \
		LD_PRELOAD="$(rsock_preload_value)" "$bin/postgres" -D "$PG/data" \
		-h "$ADDR_B" -p "$port" -k "$PG" -c fsync=off
	wait_for_port "$port" 30 "$BG_PID"
	bounded 120 env $(rsock_env init) pgbench -h "$ADDR_B" -p "$port" -U postgres -i -s 1 postgres >init.txt 2>&1 ||
		{ cat init.txt srv.err >&2; false; }
	bounded 120 env $(rsock_env pgb) pgbench -h "$ADDR_B" -p "$port" -U postgres -c 4 -T 3 postgres >pgb.txt 2>&1 ||
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

@test "threadcheck: full duplex from two threads, 8 threads on 8 sockets, close and shutdown under a blocked recv, epoll_wait against DEL and ADD from another thread, a sleeper when another thread adds the first stream, a sleeper while another thread takes the events" {
	differential threadcheck
}

@test "CPU: an idle redis-server holding 50 RDMA connections sleeps" {
	require_cmd redis-server redis-cli python3
	local port pid t0 t1 i n=50 ticks
	port=$(free_port)
	start_bg srv env $(rsock_env srv) redis-server --port "$port" --bind "$ADDR_B" --save '' \
		--appendonly no --protected-mode no --dir "$PWD"
	pid=$BG_PID
	wait_for_port "$port" 20 "$pid"
	# 50 clients in one process (test/rdma/idle.py): each connects, writes
	# a byte (the start of an inline command, which redis buffers) and
	# waits until idle.ready exists. (Fifty redis-cli processes, one per
	# connection, spent 25 s of the test starting.)
	start_bg idle env $(rsock_env idle) python3 "$BATS_TEST_DIRNAME/idle.py" cli "$ADDR_B" "$port" "$n"
	for ((i = 0; i < 300; i++)); do
		[ "$(redis-cli -h "$ADDR_B" -p "$port" info clients | tr -d '\r' | awk -F: '/^connected_clients/ {print $2}')" -ge $((n + 1)) ] && break
		sleep 0.2
	done
	[ "$i" -lt 300 ]
	srv_pid=$(pgrep -f "redis-server .*:$port" | head -n 1)
	sleep 1
	t0=$(awk '{print $14 + $15}' "/proc/$srv_pid/stat")
	sleep 5
	t1=$(awk '{print $14 + $15}' "/proc/$srv_pid/stat")
	ticks=$((t1 - t0))
	echo "# idle redis-server with $n RDMA connections: $ticks CPU ticks in 5 s ($(getconf CLK_TCK) per second)" >&3
	# redis's own 10 Hz timer costs a little; a busy-polling server would take 500.
	[ "$ticks" -le 25 ]
	echo done >idle.ready
	stop_all_bg
	stats_rdma srv.log 1 rx
	grep -oE 'streams tcp=[0-9]+ rdma=[0-9]+' srv.log | tail -n 1 | awk -F'rdma=' -v n="$n" '{ exit !($2 >= n) }'
}

@test "lazy arming: an epoll server kept busy takes no completion event per request (RSOCK_POLL_US spin)" {
	require_cmd redis-server redis-benchmark
	local port n=3000 events arms
	port=$(free_port)
	# A fixed 1 ms busy-poll: the next request comes well within it.
	start_bg srv env $(rsock_env srv) RSOCK_POLL_US=1000 RSOCK_POLL_MAX_US=0 redis-server \
		--port "$port" --bind "$ADDR_B" --save '' --appendonly no --protected-mode no --dir "$PWD"
	wait_for_port "$port" 20 "$BG_PID"
	bounded 120 env $(rsock_env bench) redis-benchmark -h "$ADDR_B" -p "$port" -t get -n "$n" \
		-c 1 -q >bench.txt 2>&1 || { cat bench.txt >&2; false; }
	stop_bg "$BG_PID"
	stats_rdma srv.log 10000 rx
	events=$(stat_of srv.log cq_events)
	arms=$(stat_of srv.log cq_arms)
	echo "# redis-server, $n GETs on one connection: $events completion events, $arms CQ arms" >&3
	# Without lazy arming every request was an event (and an arm).
	[ "$events" -lt $((n / 4)) ] && [ "$arms" -lt $((n / 4)) ]
}

@test "exec: an inetd-style server (accept, fork, exec sha256sum) serves a librsock client, on TCP" {
	require_cmd nc
	local port
	port=$(free_port)
	rand_file data 2000000
	start_bg srv env $(rsock_env srv) "$PROGS/execserver" "$ADDR_B" "$port" 1 sha256sum
	wait_for_port "$port" 20 "$BG_PID"
	bounded 60 env $(rsock_env cli) nc -N "$ADDR_B" "$port" <data >got.txt
	[ "$(cut -d' ' -f1 got.txt)" = "$(sha256sum <data | cut -d' ' -f1)" ]
	# the server declined RDMA before the exec: the client's stream is TCP
	stats_tcp cli.log not_implemented
}

@test "handcheck: a stream changes hands (exec'd image, forked child, owner closing first, system()) as over kernel TCP" {
	differential handcheck
	# the streams were moved to TCP in order, by the SWITCH exchange
	grep -qE 'stats: .* handovers=[1-9]' rdma.log || {
		grep 'stats:' rdma.log >&2
		false
	}
}

@test "bash /dev/tcp: the shell reads a line, cat (fork and exec) the rest of a 2 MB stream that came over RDMA" {
	require_cmd nc
	local port
	port=$(free_port)
	rdma_snapshot
	{ echo "hello from the server"; head -c 2000000 /dev/urandom; } >data
	tail -c +23 data >want
	BG_STDIN=data start_bg srv env $(rsock_env srv) nc -N -l -s "$ADDR_B" -p "$port"
	wait_for_port "$port" 20 "$BG_PID"
	bounded 60 env $(rsock_env sh) bash -c '
		exec 3<>"/dev/tcp/$1/$2"
		read -r first <&3
		echo "$first" >first
		# sleep inherits fd 3 over its exec: that moves the stream to TCP
		# (what came over RDMA and is unread, a prefix, goes first)
		sleep 0.5
		cat <&3 >rest
		exec 3>&-' sh "$ADDR_B" "$port" 2>sh.err || true
	[ "$(cat first)" = "hello from the server" ] || {
		cat first sh.err sh.log srv.log >&2
		false
	}
	cmp want rest
	stats_only_rdma sh.log
	grep -qE 'stats: .* handovers=[1-9]' sh.log
	stats_rdma srv.log 100000 tx
	rdma_crossed 50
}

@test "bash /dev/tcp: what builtins write (echo >&3, printf >&3: stdio on descriptor 1) reaches the server, the stream on TCP first" {
	# bash runs a builtin's redirection as dup2(3, 1) and the builtin
	# writes through stdout, inside libc: no interposer sees that write.
	# Before session 30 the bytes went on the kernel socket of an RDMA
	# stream, where the server's library dropped them as stray control
	# bytes ("unexpected bytes on the control connection"): the request
	# was lost and the shell waited for an answer for ever. A stream put
	# on descriptor 1 or 2 now moves to TCP first, as one given to fdopen.
	require_cmd python3
	local port
	port=$(free_port)
	start_bg srv env $(rsock_env srv) PYTHONPATH="$BATS_TEST_DIRNAME" python3 -c '
import echoes, sys
l = echoes.listener(sys.argv[1], int(sys.argv[2]))
c, _ = l.accept()
echoes.echo_to_eof(c)' "$ADDR_B" "$port"
	wait_for_port "$port" 20 "$BG_PID"
	run bounded 30 env $(rsock_env sh) RSOCK_LOG_LEVEL=debug bash -c '
		exec 3<>"/dev/tcp/$1/$2"
		echo one >&3
		read -r -t 10 x <&3
		printf "%s\n" two >&3
		read -r -t 10 y <&3
		echo "$x $y"
		exec 3>&-' sh "$ADDR_B" "$port"
	echo "$output"
	[ "$output" = "one two" ]
	wait_bg "$BG_PID" 30 || { bg_output "$BG_PID"; false; }
	! grep -q 'unexpected bytes' srv.log || false
}

# cpu_ticks PID: user + system clock ticks the process has used.
cpu_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

@test "credentials: a server that calls setuid after accepting (as rsync's daemon child does) keeps the stream: it moves to TCP, nothing lost" {
	# The kernel takes write()-based verbs commands (soft-RoCE's post_send,
	# every rdma_cm command) only from the credentials the device file was
	# opened with: the old library failed the application's send with EACCES.
	require_cmd python3 socat
	local port
	head -c 3000000 /dev/urandom >data
	port=$(free_port)
	start_bg srv env $(rsock_env srv) RSOCK_LOG_LEVEL=debug python3 "$BATS_TEST_DIRNAME/privdrop.py" "$ADDR_B" "$port" accept-then-setuid 2
	wait_for_port "$port" 20 "$BG_PID"
	bounded 60 env $(rsock_env cli1) socat -t 10 - "TCP4:$ADDR_B:$port,bind=$ADDR_A" <data >got1
	same_file data got1 "the stream the server changed credentials on"
	stats_rdma cli1.log 1 tx
	# After that the process's RDMA is gone: the next stream is TCP at once.
	bounded 60 env $(rsock_env cli2) socat -t 10 - "TCP4:$ADDR_B:$port,bind=$ADDR_A" <data >got2
	same_file data got2 "the next stream"
	stats_tcp cli2.log peer
	wait_bg "$BG_PID" 30
	grep -q 'the stream moves to TCP' srv.log
	grep -qE 'stats: streams tcp=1 rdma=1 .* handovers=1' srv.log
}

@test "credentials: a server that drops privileges after listen() serves librsock clients on TCP at once and does not spin" {
	require_cmd python3 socat
	local port t0 t1 c0 c1 pid
	head -c 1000000 /dev/urandom >data
	port=$(free_port)
	start_bg srv env $(rsock_env srv) RSOCK_LOG_LEVEL=debug python3 "$BATS_TEST_DIRNAME/privdrop.py" "$ADDR_B" "$port" listen-then-drop 3
	wait_for_port "$port" 20 "$BG_PID"
	pid=$(pgrep -P "$BG_PID" | head -n 1) # (start_bg runs it under timeout)
	for i in 1 2 3; do
		t0=$(date +%s%N)
		bounded 60 env $(rsock_env "cli$i") socat -t 10 - "TCP4:$ADDR_B:$port,bind=$ADDR_A" <data >"got$i"
		t1=$(date +%s%N)
		echo "# stream $i: $(((t1 - t0) / 1000000)) ms" >&3
		same_file data "got$i" "stream $i"
		stats_tcp "cli$i.log" peer
		# no probe time-out: the closed beacons refuse the probe at once
		[ $(((t1 - t0) / 1000000)) -lt 1900 ]
		if [ "$i" = 2 ]; then
			# between streams the server waits in accept(): the
			# connection manager's refused file must not spin it
			c0=$(cpu_ticks "$pid")
			sleep 2
			c1=$(cpu_ticks "$pid")
			echo "# the waiting server used $((c1 - c0)) ticks in 2 s" >&3
			[ $((c1 - c0)) -lt 50 ]
		fi
	done
	wait_bg "$BG_PID" 30
	grep -q 'new streams stay on TCP' srv.log
}

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
	# itself on most system calls: the old library's stats line at its exit
	# ended it (SIGXFSZ), and the connection with it.
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
