#!/usr/bin/env bats
# The RDMA data path (doc/design.md, "Wire protocol"), in the soft-RoCE guest
# or on a host with an RDMA device: the application observes exactly what
# kernel TCP gives it (the differential streamcheck), large streams arrive
# byte-exact, the rings, messages and credits behave as specified, and a
# stream's end (a killed peer) looks like TCP's.
#
# Which path carried the bytes is asserted twice: by librsock's own counters
# (RSOCK_STATS=1) and by the RDMA device's packet counters.

load ../bats/helpers
load rsock

# ---- the differential semantics suite ---------------------------------------

@test "streamcheck: the application observes the same over RDMA as over kernel TCP" {
	differential streamcheck
	# streamcheck's large writes (two of 3 MiB, a writev, read-only and
	# file mappings) go from the server's own buffers, without the copy
	# (its counters at exit: at least the two 3 MiB writes less their tails)
	local z
	z=$(grep -o 'zcopy=[0-9]*' rdma.log | cut -d= -f2 | sort -n | tail -1)
	echo "# ${z:-0} bytes sent without the copy" >&3
	[ "${z:-0}" -ge $((6 * 1024 * 1024 - 2 * 32768)) ]
}

@test "streamcheck over IPv6: the same observations over RDMA (RoCEv2 on IPv6) as over kernel TCP" {
	require_ipv6_env
	differential streamcheck "$ADDR_B6" "$ADDR_A6"
}

# ---- byte-exact streams, messages and rings ---------------------------------

@test "nc: 40 MB each way over RDMA, checksums equal" {
	require_cmd nc
	local port
	rdma_snapshot
	nc_upload "$ADDR_B" "$ADDR_A" 40000000
	rdma_crossed 10000

	# the other direction: the server sends, the client receives
	port=$(free_port)
	BG_STDIN=data start_bg srv2 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv2.log" \
		LD_PRELOAD="$(rsock_preload_value)" nc -N -l -s "$ADDR_B" -p "$port"
	wait_for_port "$port" 15 "$BG_PID"
	bounded 120 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli2.log" LD_PRELOAD="$(rsock_preload_value)" \
		nc -d -s "$ADDR_A" "$ADDR_B" "$port" >got2
	wait_bg "$BG_PID" 60
	same_file data got2 "nc server -> client"
	stats_rdma srv2.log 40000000 tx
	stats_rdma cli2.log 40000000 rx
}

@test "a client that writes a 1 MB request before it reads, to an echo server (both blocking): echoed intact over RDMA, as kernel TCP's buffers allow" {
	# test/rdma/echoall.py: 1 MB is four times a ring (without the spill
	# the exchange stops after about 295 KB; kernel TCP in this guest can
	# stop short of 3 MB, its buffers being autotuned). Both ends block in
	# a write, each waiting for the other to read; a blocked send moves its
	# own unread bytes out of the ring, so the peer can send on (spill).
	require_cmd python3
	local port
	port=$(free_port)
	start_bg tcpsrv env PYTHONPATH="$BATS_TEST_DIRNAME" python3 "$BATS_TEST_DIRNAME/echoall.py" srv "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	run bounded 60 env PYTHONPATH="$BATS_TEST_DIRNAME" python3 "$BATS_TEST_DIRNAME/echoall.py" cli "$ADDR_B" "$port" 1000000
	echo "kernel TCP: $output"
	[[ "$output" == *"1000000 bytes echoed intact"* ]]
	wait_bg "$BG_PID" 30
	port=$(free_port)
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/srv.log" \
		LD_PRELOAD="$(rsock_preload_value)" PYTHONPATH="$BATS_TEST_DIRNAME" \
		python3 "$BATS_TEST_DIRNAME/echoall.py" srv "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	run bounded 60 env RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/cli.log" \
		LD_PRELOAD="$(rsock_preload_value)" PYTHONPATH="$BATS_TEST_DIRNAME" \
		python3 "$BATS_TEST_DIRNAME/echoall.py" cli "$ADDR_B" "$port" 1000000
	echo "librsock: $output"
	[ "$status" = 0 ] || { bg_output "$BG_PID"; grep -v poll cli.log | tail -20; false; }
	[[ "$output" == *"1000000 bytes echoed intact"* ]]
	wait_bg "$BG_PID" 30
	stats_only_rdma cli.log
	stats_only_rdma srv.log
	echo "spills: client $(grep -c 'kept beyond the ring' cli.log), server $(grep -c 'kept beyond the ring' srv.log)"
	grep -q 'kept beyond the ring' cli.log srv.log # either end may be first
}

@test "splice into a non-blocking stream handed to TCP with its peer's bytes still unread: only what the socket takes leaves the pipe, 4 MiB intact, as over kernel TCP" {
	# test/rdma/splicein.py: the first splice hands the stream over with
	# the client's 100,000 bytes as its prefix; the later ones meet a full
	# socket (the client sleeps) and must say EAGAIN with the pipe's bytes
	# still in it, as the kernel's splice does.
	require_cmd python3
	local path port
	for path in tcp rdma; do
		port=$(free_port)
		start_bg "srv-$path" env $(path_env "$path" "srv-$path") \
			python3 "$BATS_TEST_DIRNAME/splicein.py" srv "$ADDR_B" "$port"
		wait_for_port "$port" 15 "$BG_PID"
		run bounded 60 env $(path_env "$path" "cli-$path") \
			python3 "$BATS_TEST_DIRNAME/splicein.py" cli "$ADDR_B" "$port"
		echo "$path: $output"
		[ "$status" = 0 ]
		[ "$output" = "received 4194304 intact True" ]
		wait_bg "$BG_PID" 30 || { bg_output "$BG_PID"; false; }
		[ "$(cat "srv-$path.out")" = "spliced 4194304 eagain yes unread bytes intact True" ]
	done
	grep -q 'handovers=1' srv-rdma.log
	stats_only_rdma cli-rdma.log
}

@test "small writes reach the peer at once when the writer then sleeps without a socket call, and all of them when it exits without closing" {
	# test/rdma/burst.py: 200 writes of 100 bytes, then a 3 s sleep (no
	# socket call the library sees) before the client reads; the server
	# notes when the last byte came. Then the same writes and exit() with
	# the stream never closed.
	require_cmd python3
	local port t0 t1
	for path in tcp rdma; do
		local pre=() env=(RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli-$path.log" PYTHONPATH="$BATS_TEST_DIRNAME")
		[ "$path" = rdma ] && pre=(LD_PRELOAD="$(rsock_preload_value)")
		port=$(free_port)
		start_bg "srv-$path" env "${pre[@]}" RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv-$path.log" \
			PYTHONPATH="$BATS_TEST_DIRNAME" python3 "$BATS_TEST_DIRNAME/burst.py" srv "$ADDR_B" "$port" 20000
		wait_for_port "$port" 15 "$BG_PID"
		run bounded 30 env "${pre[@]}" "${env[@]}" python3 "$BATS_TEST_DIRNAME/burst.py" cli "$ADDR_B" "$port" 20000 sleep
		echo "$path: $output"
		[ "$status" = 0 ] || { bg_output "$BG_PID"; false; }
		[[ "$output" == *"answer b'ok'"* ]]
		wait_bg "$BG_PID" 30
		grep -qx intact "srv-$path.out"
		t0=$(sed -n 's/^last write at //p' <<<"$output")
		t1=$(sed -n 's/^all 20000 bytes at //p' "srv-$path.out")
		echo "$path: the last byte came $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) * 1000 }') ms after the last write"
		awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 1.0) }'
	done
	stats_only_rdma cli-rdma.log
	stats_only_rdma srv-rdma.log
	port=$(free_port)
	start_bg srv-exit env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv-exit.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" python3 "$BATS_TEST_DIRNAME/burst.py" srv "$ADDR_B" "$port" 20000
	wait_for_port "$port" 15 "$BG_PID"
	bounded 30 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli-exit.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" python3 "$BATS_TEST_DIRNAME/burst.py" cli "$ADDR_B" "$port" 20000 exit
	wait_bg "$BG_PID" 30
	grep -qx intact srv-exit.out
	stats_only_rdma srv-exit.log
	stats_only_rdma cli-exit.log
}

@test "message sizes: large blocking sends go in 128 KiB messages without the copy, copied ones in 32 KiB messages, small ones inline" {
	require_cmd python3
	# The sender's trace lines name every data message it posts
	# (doc/design.md, "Wire protocol"): 1 MiB sendall()s (test/rdma/sink.py) are sent from the
	# application's buffer in messages of up to TP_MAX_ZC_CHUNK (128 KiB,
	# half the peer's 256 KiB ring at most), the call's last 32 KiB copied;
	# with RSOCK_ZCOPY_KB=0 every message is copied, at most TP_MAX_CHUNK
	# (32 KiB). The bytes arrive intact either way.
	local port zc max n
	for zc in 256 0; do
		port=$(free_port)
		start_bg "sink$zc" env LD_PRELOAD="$(rsock_preload_value)" \
			python3 "$BATS_TEST_DIRNAME/sink.py" srv "$ADDR_B" "$port"
		wait_for_port "$port" 15 "$BG_PID"
		bounded 60 env LD_PRELOAD="$(rsock_preload_value)" RSOCK_ZCOPY_KB="$zc" \
			RSOCK_LOG_LEVEL=trace RSOCK_LOG_FILE="$PWD/msgs$zc.log" \
			python3 "$BATS_TEST_DIRNAME/sink.py" cli "$ADDR_B" "$port" 8
		wait_bg "$BG_PID" 30
		grep -q "^got 8388608 " "sink$zc.out"
		max=$(sed -n 's/.* data message of \([0-9]*\) bytes.*/\1/p' "msgs$zc.log" | sort -n | tail -1)
		n=$(grep -c " data message of " "msgs$zc.log")
		echo "# RSOCK_ZCOPY_KB=$zc: $n data messages, the largest $max bytes" >&3
		if [ "$zc" = 256 ]; then
			[ "$max" = 131072 ]
			grep -q " data message of 131072 bytes, sent without the copy" "msgs$zc.log"
			grep -q " data message of [0-9]* bytes$" "msgs$zc.log" # the copied ends
			# 8 x (7 x 128 KiB + 96 KiB + 32 KiB copied) = 72 when the
			# room never cuts a message short; copying all: 256 or more
			[ "$n" -le 160 ]
		else
			[ "$max" = 32768 ]
			# (`|| false`: a negated command alone never fails a bats test)
			! grep -q "without the copy" "msgs$zc.log" || false
			[ "$n" -ge 256 ]
		fi
	done
	# a 10-byte write is one inline message
	port=$(free_port)
	start_bg small env LD_PRELOAD="$(rsock_preload_value)" \
		python3 "$BATS_TEST_DIRNAME/sink.py" srv "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	bounded 60 env LD_PRELOAD="$(rsock_preload_value)" RSOCK_LOG_LEVEL=trace \
		RSOCK_LOG_FILE="$PWD/small.log" python3 -c '
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(b"0123456789")
s.close()' "$ADDR_B" "$port"
	wait_bg "$BG_PID" 30
	grep -q "^got 10 " small.out
	grep -q " data message of 10 bytes, inline" small.log
}

@test "ring sizes follow SO_RCVBUF/SO_SNDBUF (iperf3 -w 64K), RSOCK_RING_KB otherwise" {
	require_cmd iperf3
	local port
	port=$(free_port)
	start_bg srv env RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		iperf3 -s -B "$ADDR_B" -p "$port"
	wait_for_port "$port" 20 "$BG_PID"
	bounded 60 env RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		iperf3 -c "$ADDR_B" -B "$ADDR_A" -p "$port" -t 1 -w 64K >out.txt 2>&1 || { cat out.txt >&2; false; }
	grep -E 'rings rx' cli.log srv.log
	# the control stream keeps the default, the data stream follows -w
	grep -q 'rings rx 262144 tx 262144' cli.log
	grep -q 'rings rx 65536 tx 65536' cli.log
	grep -q 'rings rx 65536 tx 65536' srv.log
	grep -q 'receiver' out.txt
}

@test "short connections reuse registered rings (RSOCK_RING_CACHE), torn down off the closing thread: 12 sequential HTTP fetches, byte-exact" {
	# Each fetch is a new stream; from the second on, both ends take the
	# rings (memory, registration, protection domain, completion channel
	# and CQ) a closed stream left.
	require_cmd python3
	local port i
	mkdir www
	for i in $(seq 0 11); do rand_file "www/f$i" $((100000 + i * 37000)); done
	port=$(free_port)
	start_bg srv env RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		python3 -m http.server -b "$ADDR_B" -d www "$port"
	wait_for_port "$port" 15 "$BG_PID"
	fetch_all() { # LOG N [ENV...]: fetch f0..f(N-1) into got0.., one connection each
		local log=$1 n=$2
		shift 2
		bounded 60 env RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/$log" "$@" \
			LD_PRELOAD="$(rsock_preload_value)" python3 -c '
import http.client, sys
for i in range(int(sys.argv[4])):
    c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=20,
                                   source_address=(sys.argv[3], 0))
    c.request("GET", "/f%d" % i)
    r = c.getresponse()
    with open("got%d" % i, "wb") as f:
        f.write(r.read())
    c.close()
' "$ADDR_B" "$port" "$ADDR_A" "$n"
	}
	fetch_all cli.log 12
	for i in $(seq 0 11); do same_file "www/f$i" "got$i" "fetch $i"; done
	stats_only_rdma cli.log
	stats_rdma cli.log 1000000 rx
	echo "reused: client $(grep -c 'bytes reused' cli.log), server $(grep -c 'bytes reused' srv.log)"
	[ "$(grep -c 'bytes reused' cli.log)" -ge 10 ]
	[ "$(grep -c 'bytes reused' srv.log)" -ge 10 ]
	# and the completion channel and CQ that came with them
	[ "$(grep -c 'bytes reused, with their CQ' cli.log)" -ge 10 ]
	[ "$(grep -c 'bytes reused, with their CQ' srv.log)" -ge 10 ]
	# Closed streams were torn down off the closing thread: by the library's
	# thread, or by the next stream, which took their rings.
	local l
	for l in cli.log srv.log; do
		[ "$(grep -c 'closed stream torn down at close' "$l")" -eq 0 ]
		[ "$(grep -cE 'closed stream torn down (by the library.s thread|for a new stream)' "$l")" -ge 11 ]
	done
	# RSOCK_RING_CACHE=0: every stream registers its own
	rm -f got*
	fetch_all cli0.log 3 RSOCK_RING_CACHE=0
	for i in 0 1 2; do same_file "www/f$i" "got$i" "fetch $i without the cache"; done
	[ "$(grep -c 'bytes registered' cli0.log)" -ge 3 ]
	! grep -q 'bytes reused' cli0.log || false
}

# churn_run N MARK: test/rdma/churn.py's N streams between two librsock
# processes, every second one reset by the client (SO_LINGER {1, 0}, the echo
# unread), after N/50 streams kernel TCP's close() timed the same way; then
# what each process holds after MARK streams and after N: no QP outlives its
# stream, the ring cache keeps at most 8 sets (a CQ, its completion
# channel's descriptor and two MRs each), the other descriptors are the same
# (but for a thread's wake-up eventfd, made once) and the resident set grows
# by less than RSS_SLACK KiB beyond the cached sets' registered bytes.
churn_run() {
	local n=$1 mark=$2 port tcp_close RSOCK_BG_TIMEOUT=$((300 + $1 / 5))
	port=$(free_port)
	start_bg srv env -u LD_PRELOAD python3 "$BATS_TEST_DIRNAME/churn.py" serve "$ADDR_B" "$port" 20
	wait_for_port "$port" 15 "$BG_PID"
	run bounded 60 env -u LD_PRELOAD python3 "$BATS_TEST_DIRNAME/churn.py" client "$ADDR_B" "$port" 20 10 abrupt
	[ "$status" -eq 0 ]
	tcp_close=$(sed -n 's/^close_p50_us //p' <<<"$output")
	wait_bg "$BG_PID" 30
	port=$(free_port)
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		python3 "$BATS_TEST_DIRNAME/churn.py" serve "$ADDR_B" "$port" "$n" "$mark"
	wait_for_port "$port" 15 "$BG_PID"
	rdma_snapshot
	run bounded $((60 + n / 5)) env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		python3 "$BATS_TEST_DIRNAME/churn.py" client "$ADDR_B" "$port" "$n" "$mark" abrupt
	echo "$output"
	[ "$status" -eq 0 ]
	echo "# close() p50: librsock $(sed -n 's/^close_p50_us //p' <<<"$output") us, kernel TCP $tcp_close us" >&3
	wait_bg "$BG_PID" 60
	cat "$BATS_TEST_TMPDIR/srv.out" "$BATS_TEST_TMPDIR/srv.err"
	grep -E "^served $n echoed [0-9]+ failed [0-9]+$" "$BATS_TEST_TMPDIR/srv.out"
	rdma_crossed $((n * 5))
	stats_only_rdma cli.log
	stats_only_rdma srv.log
	churn_flat client "$output"
	churn_flat server "$(cat "$BATS_TEST_TMPDIR/srv.out")"
}

# churn_flat WHO OUTPUT: the "at" lines of one end, held after MARK and
# after N compared (churn_run's n and mark).
churn_flat() {
	local q0 c0 m0 l0 f0 r0 q1 c1 m1 l1 f1 r1
	read -r q0 c0 m0 l0 f0 r0 < <(sed -n "s/^at $mark qp \([0-9]*\) cq \([0-9]*\) mr \([0-9]*\) mrlen \([0-9]*\) fds \([0-9]*\) rss \([0-9]*\)/\1 \2 \3 \4 \5 \6/p" <<<"$2")
	read -r q1 c1 m1 l1 f1 r1 < <(sed -n "s/^at $n qp \([0-9]*\) cq \([0-9]*\) mr \([0-9]*\) mrlen \([0-9]*\) fds \([0-9]*\) rss \([0-9]*\)/\1 \2 \3 \4 \5 \6/p" <<<"$2")
	echo "# $1 held after $mark: qp $q0 cq $c0 mr $m0 ($l0 B) fds $f0 rss $r0 KiB; after $n: qp $q1 cq $c1 mr $m1 ($l1 B) fds $f1 rss $r1 KiB" >&3
	[ -n "$r1" ]
	[ "$q1" -le 1 ]
	[ "$c1" -le 9 ] && [ "$c1" -le $((c0 + 1)) ]
	[ "$m1" -le 18 ] && [ "$m1" -le $((m0 + 2)) ]
	[ "$l1" -le $((l0 + 1048576)) ]
	# a cached set's CQ has its completion channel's descriptor; the one
	# thread's wake-up eventfd is made at its first sleep in the library,
	# which may come after MARK streams
	[ "$f1" -le $((f0 + c1 - c0 + 1)) ]
	# a cached set's rings are resident (registered memory is pinned)
	[ "$r1" -le $((r0 + (l1 - l0) / 1024 + RSS_SLACK)) ]
}

@test "churn: 500 streams, every second one reset by the client: neither process holds more QPs, CQs, registrations, descriptors or memory at the end than after 50; close() timed against kernel TCP" {
	# 500, not 10,000: the TCG guest makes 12 (loaded host) to 80 streams a
	# second, so this takes 7 to 40 s; RSOCK_SLOW_TESTS=1 runs 10,000.
	# A Python process's resident set moves by up to 6 MiB either way
	# between two readings on a loaded host (glibc's cache of exited
	# threads' stacks, its malloc arenas): the slack here is 8 MiB, and the
	# 10,000 streams' 2 MiB is what bounds a leak a stream.
	require_cmd python3 rdma
	local n=500 mark=50 RSS_SLACK=8192
	churn_run "$n" "$mark"
}

@test "churn: 10,000 streams, every second one reset, held resources flat after 1,000 (RSOCK_SLOW_TESTS=1)" {
	[ "${RSOCK_SLOW_TESTS:-0}" = 1 ] || skip "two to fifteen minutes: RSOCK_SLOW_TESTS=1 runs it"
	require_cmd python3 rdma
	local n=10000 mark=1000 RSS_SLACK=2048
	churn_run "$n" "$mark"
}

@test "streams closed right after a large write each: every peer gets every byte (checksums), lingering closes too, and the writer exiting right after its last closes" {
	# test/rdma/closewrite.py: 48 streams, 8 at a time, each writes 1 MiB
	# (four times the ring: the last of it is still in flight at close) and
	# closes at once; every fourth lingers (SO_LINGER {1, 5}). close() leaves
	# the wait for the last writes and the teardown to the library's
	# thread; the last 8 are closed one after the other and exit() follows
	# at once, so the exit's drain has closed streams to deliver (the
	# debug log says how many; soft-RoCE completes a post inside the call,
	# so none is still busy there).
	require_cmd python3
	local port
	port=$(free_port)
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		python3 "$BATS_TEST_DIRNAME/closewrite.py" serve "$ADDR_B" "$port" 48
	wait_for_port "$port" 15 "$BG_PID"
	rdma_snapshot
	bounded 120 env RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/cli.log" \
		LD_PRELOAD="$(rsock_preload_value)" \
		python3 "$BATS_TEST_DIRNAME/closewrite.py" client "$ADDR_B" "$port" 48 1048576 8
	wait_bg "$BG_PID" 60
	cat srv.out
	grep -qx "intact 48 of 48" srv.out
	rdma_crossed $((48 * 64))
	stats_only_rdma cli.log
	stats_only_rdma srv.log
	# No closed stream was torn down in close(): by the library's thread or
	# a new stream, or left to the kernel by the exit
	[ "$(grep -c 'closed stream torn down at close' cli.log)" -eq 0 ]
	[ "$(grep -cE 'closed stream torn down (by the library.s thread|for a new stream)' cli.log)" -ge 1 ]
	echo "# $(grep -o 'at exit, .*' cli.log || echo 'at exit, no closed stream left')" >&3
}

# ---- endings ----------------------------------------------------------------

@test "a peer killed with SIGKILL: EOF or ECONNRESET within a second, no hang" {
	local port
	port=$(free_port)
	start_bg srv env LD_PRELOAD="$(rsock_preload_value)" python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
c, _ = s.accept(); c.sendall(b"ready"); time.sleep(60)
' "$ADDR_B" "$port"
	local srv=$BG_PID
	wait_for_port "$port" 15 "$srv"
	run bounded 20 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" python3 -c '
import os, socket, sys, time, signal
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), source_address=(sys.argv[3], 0))
assert c.recv(5) == b"ready"
os.kill(int(sys.argv[4]), signal.SIGKILL)
t = time.monotonic()
try:
    r = c.recv(10)
    what = "EOF" if r == b"" else "data"
except ConnectionResetError:
    what = "ECONNRESET"
print(what, round(time.monotonic() - t, 2))
' "$ADDR_B" "$port" "$ADDR_A" "$(pgrep -P "$srv" python3 || echo "$srv")"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^(EOF|ECONNRESET)\ ([0-9.]+)$ ]]
	awk -v t="${BASH_REMATCH[2]}" 'BEGIN { exit !(t < 1.0) }'
	stats_rdma cli.log 5 rx
}
