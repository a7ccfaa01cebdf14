#!/usr/bin/env bats
# Readiness and waiting on RDMA streams (doc/design.md, "Readiness"): epoll, poll and select give exactly
# kernel TCP's events, from one thread or many and across a hand-over to TCP;
# a blocked or idle process sleeps instead of spinning, and a busy one takes
# no completion event per request.

load ../bats/helpers
load rsock

# ---- events as kernel TCP's -------------------------------------------------

@test "evcheck: epoll, poll and select events over RDMA are kernel TCP's" {
	differential evcheck
}

@test "threadcheck: full duplex from two threads, 8 threads on 8 sockets, close and shutdown under a blocked recv, epoll_wait against DEL and ADD from another thread, a sleeper when another thread adds the first stream, a sleeper while another thread takes the events" {
	differential threadcheck
}

@test "epoll wakes for the TCP bytes that follow a hand-over: a stream registered (level and edge) while on RDMA, then handed to TCP by a splice into it (as haproxy's splice-auto does)" {
	require_cmd python3
	# test/rdma/hoepoll.py: the server registers the stream, splices one
	# byte into it (a non-blocking stream: handed to TCP) and waits in
	# epoll_wait for the client's next bytes, written 0.3 s later. A
	# registration that slept through them (5 s, nothing) would stall
	# haproxy (splice-auto) both ways.
	local port m
	for m in lt et; do
		port=$(free_port)
		start_bg "srv-$m" env $(rsock_env "srv-$m") python3 "$BATS_TEST_DIRNAME/hoepoll.py" srv "$ADDR_B" "$port" "$m"
		wait_for_port "$port" 15 "$BG_PID"
		run bounded 30 env $(rsock_env "cli-$m") python3 "$BATS_TEST_DIRNAME/hoepoll.py" cli "$ADDR_B" "$port"
		echo "$output"
		[ "$status" -eq 0 ]
		[ "$output" = "answer b'pong'" ]
		wait_bg "$BG_PID" 30 || { bg_output "$BG_PID"; false; }
		cat "srv-$m.out"
		grep -qE "^$m: woke after 0\.[0-9]+ s with b'ping'$" "srv-$m.out"
		grep -qE 'handovers=1' "srv-$m.log"
		stats_only_rdma "srv-$m.log"
	done
}

# ---- sleeping, not spinning -------------------------------------------------

@test "idle blocked readers sleep: 50 threads in recv() on silent RDMA streams do not wake, as on TCP, and each wakes for its EOF" {
	require_cmd python3
	# test/rdma/idle.py: the server's threads' voluntary context switches
	# over 3 s while each blocks in recv() on a silent client: fewer than
	# 25, as on TCP (a sleep that woke every second would make about 150).
	local port w
	for path in tcp rdma; do
		local pre=()
		[ "$path" = rdma ] && pre=(LD_PRELOAD="$(rsock_preload_value)")
		port=$(free_port)
		rm -f idle.ready
		start_bg "idle-$path" env "${pre[@]}" RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/idle-$path.log" \
			python3 "$BATS_TEST_DIRNAME/idle.py" srv "$ADDR_B" "$port" 50 3
		wait_for_port "$port" 15 "$BG_PID"
		bounded 60 env "${pre[@]}" python3 "$BATS_TEST_DIRNAME/idle.py" cli "$ADDR_B" "$port" 50
		wait_bg "$BG_PID" 30
		cat "idle-$path.out"
		grep -qx "eofs 50 of 50" "idle-$path.out"
		w=$(sed -n 's/.*: \([0-9]*\) wake-ups.*/\1/p' "idle-$path.out")
		[ -n "$w" ] && [ "$w" -lt 25 ]
	done
	stats_only_rdma idle-rdma.log
}

@test "a bulk reader sleeps between large messages instead of spinning through the transfer; the bytes arrive intact" {
	require_cmd python3
	# test/rdma/sink.py: 16 MiB in 1 MiB writes to a server reading to
	# EOF. With a 100 ms ceiling the adaptive poll would catch nearly
	# every message spinning (4-10 completion events, and a CPU held for
	# the whole transfer); a reader that only reads large messages spins
	# RSOCK_POLL_US and sleeps (about 460 events).
	# The sender copies (RSOCK_ZCOPY_KB=0), so its messages are 32 KiB:
	# spans sent without the copy go in 128 KiB messages, about 140 for
	# 16 MiB, too close to the bound for a sleep on each.
	local port events
	port=$(free_port)
	start_bg sink env LD_PRELOAD="$(rsock_preload_value)" RSOCK_POLL_MAX_US=100000 \
		RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/sink.log" \
		python3 "$BATS_TEST_DIRNAME/sink.py" srv "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	bounded 60 env LD_PRELOAD="$(rsock_preload_value)" RSOCK_ZCOPY_KB=0 \
		python3 "$BATS_TEST_DIRNAME/sink.py" cli "$ADDR_B" "$port" 16
	wait_bg "$BG_PID" 30
	cat sink.out
	grep -q "^got 16777216 " sink.out
	stats_only_rdma sink.log
	events=$(stat_of sink.log cq_events)
	echo "# bulk reader: $events completion events, $(cut -d' ' -f4 sink.out) s of CPU" >&3
	[ "$events" -ge 100 ]
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
	# connection, would spend 25 s of the test starting.)
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

# thread_wakes PID: the context switches of PID's threads but its main one
# (the library's threads), summed
thread_wakes() {
	local s n=0 tid
	for s in /proc/"$1"/task/*/status; do
		tid=${s%/status}
		[ "${tid##*/}" = "$1" ] && continue
		n=$((n + $(awk '/ctxt_switches/ { s += $2 } END { print s + 0 }' "$s" 2>/dev/null || echo 0)))
	done
	echo "$n"
}

@test "the library's thread sleeps while a stream is busy: a ping-pong whose reader spins wakes it about once per read mark (20 ms), not each millisecond" {
	local port pid w0 w1 i
	build_sockbench
	port=$(free_port)
	start_bg srv env $(rsock_env srv) ./sb server "$ADDR_B" "$port" 1
	wait_for_port "$port" 15 "$BG_PID"
	# far more round trips than the window takes; stopped after it
	start_bg cli env $(rsock_env cli) ./sb pingpong "$ADDR_B" "$port" "$ADDR_A" 64 10000000
	for ((i = 0; i < 100; i++)); do
		pid=$(pgrep -f "^\./sb pingpong $ADDR_B $port " | head -n 1)
		[ -n "$pid" ] && [ "$(ls /proc/"$pid"/task 2>/dev/null | wc -l)" -ge 2 ] && break
		sleep 0.1
	done
	[ "$i" -lt 100 ]
	sleep 1
	w0=$(thread_wakes "$pid")
	sleep 3
	w1=$(thread_wakes "$pid")
	kill -0 "$pid" # (still exchanging)
	run "$RSOCK_BUILD_DIR/tools/rsock-stat" -j -p "$pid"
	stop_all_bg
	echo "$output"
	grep -qE '"path": ?"rdma"' <<<"$output"
	echo "# the client's own threads over 3 s of ping-pong: $((w1 - w0)) context switches" >&3
	# A turn per read mark is 150 in 3 s, with the library's once-a-second
	# looks; the thread that looked again each millisecond while the
	# reader's spin held the stream's lock switched some 1,000 times.
	[ $((w1 - w0)) -le 450 ]
}

@test "lazy arming: an epoll server kept busy takes no completion event per request (RSOCK_POLL_US spin)" {
	require_cmd redis-server redis-benchmark
	local port n=3000 events arms
	port=$(free_port)
	# A fixed 10 ms busy-poll (the most RSOCK_POLL_US takes): the next
	# request comes well within it, on a loaded host too (1 ms was not
	# enough there).
	start_bg srv env $(rsock_env srv) RSOCK_POLL_US=10000 RSOCK_POLL_MAX_US=0 redis-server \
		--port "$port" --bind "$ADDR_B" --save '' --appendonly no --protected-mode no --dir "$PWD"
	wait_for_port "$port" 20 "$BG_PID"
	bounded 120 env $(rsock_env bench) redis-benchmark -h "$ADDR_B" -p "$port" -t get -n "$n" \
		-c 1 -q >bench.txt 2>&1 || { cat bench.txt >&2; false; }
	stop_bg "$BG_PID"
	stats_rdma srv.log 10000 rx
	events=$(stat_of srv.log cq_events)
	arms=$(stat_of srv.log cq_arms)
	echo "# redis-server, $n GETs on one connection: $events completion events, $arms CQ arms" >&3
	# Without lazy arming every request would be an event (and an arm).
	[ "$events" -lt $((n / 4)) ] && [ "$arms" -lt $((n / 4)) ]
}
