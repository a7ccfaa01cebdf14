#!/usr/bin/env bats
# A peer that dies or stops, and a process at its limits (locked memory,
# queue pairs, descriptors): each scenario runs twice, over kernel TCP (the
# same program, no preload) and over librsock, and what the application saw
# must be the same (bytes by SHA-256, errno, EOF, "within a second").
# The programs: test/rdma/limits.py, test/rdma/faultpair.py.
# shellcheck disable=SC2046,SC2086 # commands and variables given as words

load ../bats/helpers
load rsock

LP=

setup() {
	cd "$BATS_TEST_TMPDIR"
	LP="python3 $BATS_TEST_DIRNAME/limits.py"
	export PYTHONPATH=$BATS_TEST_DIRNAME
}

# same_outcome: tcp.txt and rdma.txt (what the program printed over each)
# are equal; both shown as TAP comments.
same_outcome() {
	sed 's/^/# tcp:  /' tcp.txt >&3
	diff -u tcp.txt rdma.txt >&2 || {
		echo "librsock's outcome differs from kernel TCP's (above)" >&2
		return 1
	}
	echo "# librsock: the same ($(wc -l <rdma.txt) lines)" >&3
}

# kill_pair CASES [ENV...]: limits.py's kill CASES over kernel TCP
# (tcp.txt), then from a librsock client with ENV too (rdma.txt, its log
# cli.log, the RDMA packets counted from here on); the outcomes the same.
kill_pair() {
	local cases=$1 port
	shift
	port=$(free_port 16) # (a port a case)
	# shellcheck disable=SC2086 # the cases split into words
	bounded 90 $LP kill "$ADDR_B" "$port" $cases >tcp.txt
	port=$(free_port 16)
	rdma_snapshot
	# shellcheck disable=SC2046,SC2086
	bounded 90 env "$@" $(rsock_env cli) $LP kill "$ADDR_B" "$port" $cases >rdma.txt
	same_outcome
}

# nobody KB: the words that run a command as the user nobody (root ignores
# RLIMIT_MEMLOCK) with that much locked memory, from the test's directory
# made writable.
nobody() {
	chmod 777 "$BATS_TEST_TMPDIR"
	echo prlimit --memlock=$(($1 * 1024)) setpriv --reuid=nobody --regid=nogroup --clear-groups
}

# echo_srv: limits.py's echo server for any number of streams at B, as root
# under librsock (log srv.log); its port in SRV_PORT.
echo_srv() {
	SRV_PORT=$(free_port)
	start_bg srv env $(rsock_env srv) $LP srv "$ADDR_B" "$SRV_PORT"
	wait_for_port "$SRV_PORT" 15 "$BG_PID"
}

# ---- a peer killed, a peer stopped ---------------------------------------------

@test "limits: a peer killed with SIGKILL, sending or receiving, with bytes unread at either end: blocked read, write, poll and epoll_wait return within 1 s what kernel TCP's return" {
	local cases="send/read sendrst/read sendrst/poll unread/read unreadrst/read recv/epoll norecv/write
		norecv/poll"
	kill_pair "$cases"
	[ "$(grep -c ' fast' rdma.txt)" -eq 6 ]
	! grep -q slow rdma.txt
	[ "$(stat_of cli.log rdma)" -eq 8 ]
	stats_only_rdma cli.log
	rdma_crossed 500
}

# A reader writes into its peer's word what it read, within 20 ms (the
# read mark), so the survivor tells a peer that left 100 bytes unread, in
# its ring or moved to its spill and credited (a reset), from one that
# read its last 100 (EOF), as credits could not (doc/design.md, "Wire
# protocol").
@test "limits: a peer killed with 100 bytes or 10 KB unread (below a quarter of the ring, or in its spill): the survivor's read gets ECONNRESET and its write EPIPE; one that read them: EOF, as over kernel TCP" {
	local cases="sendrst:100/read sendrst:10000/read sendrst:100/poll spillrst:100/read spillrst:10000/poll
		recv:100/read recv:10000/read recv:100/epoll"
	kill_pair "$cases" RSOCK_LOG_LEVEL=debug
	[ "$(grep -c 'read returned ECONNRESET.*then write EPIPE' rdma.txt)" -eq 3 ]
	[ "$(grep -c 'read returned EOF.*then write EPIPE' rdma.txt)" -eq 2 ]
	[ "$(grep -c ' fast' rdma.txt)" -eq 8 ]
	! grep -q slow rdma.txt
	grep -q 'unread bytes kept beyond the ring' cli.log # (the victims' spills)
	[ "$(stat_of cli.log rdma)" -eq 8 ]
	stats_only_rdma cli.log
	rdma_crossed 200
}

# TCP's reset leaves its error in the socket until a call reports it:
# getsockopt(SO_ERROR) once (then 0), poll's POLLERR until then.
@test "limits: a peer killed with 100 bytes or 10 KB unread: getsockopt(SO_ERROR) says ECONNRESET once, poll POLLERR until it did, then read EOF and write EPIPE; one that read them: 0; as over kernel TCP" {
	local cases="sendrst:100/soerr sendrst:10000/soerr sendrst:100/pollsoerr recv:100/soerr recv:100/pollsoerr"
	kill_pair "$cases"
	[ "$(grep -c 'SO_ERROR ECONNRESET then 0; then poll IN|HUP|RDHUP; then read 0 bytes then EOF; then write EPIPE' rdma.txt)" -eq 3 ]
	grep -q 'pollsoerr: .*poll IN|ERR|HUP|RDHUP; SO_ERROR ECONNRESET' rdma.txt
	[ "$(grep -c 'SO_ERROR 0 then 0' rdma.txt)" -eq 2 ]
	[ "$(stat_of cli.log rdma)" -eq 5 ]
	stats_only_rdma cli.log
	rdma_crossed 100
}

@test "limits: a peer stopped (SIGSTOP) for 3 s mid-stream, then continued: the echo goes on intact, no error, as over kernel TCP" {
	local run port pre t0 t1 i n=20000000
	rand_file data "$n"
	for run in tcp rdma; do
		port=$(free_port)
		pre=
		[ $run = rdma ] && pre="$(rsock_env "srv-$run")"
		rm -f got back
		start_bg "srv-$run" env $pre python3 "$BATS_TEST_DIRNAME/faultpair.py" srv "$ADDR_B" "$port" got echo
		local srv=$BG_PID pid
		wait_for_port "$port" 15 "$srv"
		pid=$(pgrep -f -P "$srv" faultpair.py)
		start_bg "cli-$run" env ${pre:+$(rsock_env "cli-$run")} python3 "$BATS_TEST_DIRNAME/faultpair.py" cli \
			"$ADDR_B" "$port" data back
		local cli=$BG_PID
		for ((i = 0; i < 400; i++)); do # the server's first bytes
			[ -s got ] && break
			sleep 0.05
		done
		kill -STOP "$pid"
		t0=$(stat -c %s got)
		sleep 3
		t1=$(stat -c %s got)
		kill -CONT "$pid"
		wait_bg "$cli" 60
		wait_bg "$srv" 30
		echo "# $run: the server stopped at $t0 bytes ($t1 3 s later)" >&3
		[ "$t1" -lt "$n" ]
		sed 's/ at [0-9.]*$//' "cli-$run.out" "srv-$run.out" >"$run.txt"
		same_file data got "$run: client to server"
		same_file data back "$run: server to client"
	done
	same_outcome
	grep -qx "cli sent $n then ok" rdma.txt
	stats_only_rdma cli-rdma.log
	stats_only_rdma srv-rdma.log
}

# ---- locked memory, queue pairs -------------------------------------------------

@test "limits: RLIMIT_MEMLOCK too small for a ring (a non-root user, 64 KiB): both ends stay on TCP, echo intact, 'resources' counted, nothing printed to the application" {
	local run port n=3000000
	rand_file data "$n"
	for run in tcp rdma; do
		local pre="" srvlog=/dev/null
		[ $run = rdma ] && pre="RSOCK_STATS=1 LD_PRELOAD=$(rsock_preload_value)"
		port=$(free_port)
		rm -f got back
		start_bg "srv-$run" $(nobody 64) env $pre \
			python3 "$BATS_TEST_DIRNAME/faultpair.py" srv "$ADDR_B" "$port" got echo
		local srv=$BG_PID
		wait_for_port "$port" 15 "$srv"
		bounded 60 $(nobody 64) env $pre python3 "$BATS_TEST_DIRNAME/faultpair.py" cli "$ADDR_B" "$port" data back \
			>"cli-$run.out" 2>"cli-$run.err"
		wait_bg "$srv" 30
		sed 's/ at [0-9.]*$//' "cli-$run.out" "srv-$run.out" >"$run.txt"
		same_file data got "$run: client to server"
		same_file data back "$run: server to client"
	done
	same_outcome
	# librsock's only words on stderr: the statistics RSOCK_STATS asked for
	! grep -v 'info: stats: ' cli-rdma.err srv-rdma.err
	stats_tcp cli-rdma.err resources
	stats_tcp srv-rdma.err protocol # (the client's hello never came: inject.bats's reg_mr)
}

# many_streams K BYTES PREFIX...: limits.py's many (K streams at once, BYTES
# echoed on each) to echo_srv's server, over kernel TCP (tcp.txt), then
# under librsock (rdma.txt, its stderr in cli.log: a user nobody may not
# open the test's files), each run by the words PREFIX.
many_streams() {
	local k=$1 n=$2
	shift 2
	echo_srv
	bounded 60 "$@" $LP many "$ADDR_B" "$SRV_PORT" "$k" "$n" >tcp.txt
	rdma_snapshot
	bounded 60 "$@" env RSOCK_STATS=1 LD_PRELOAD="$(rsock_preload_value)" $LP many "$ADDR_B" "$SRV_PORT" \
		"$k" "$n" >rdma.txt 2>cli.log
	same_outcome
}

@test "limits: locked memory for 2 streams' rings only (a non-root user): of 6 streams at once the first 2 on RDMA, 4 on TCP counted 'resources', every echo intact" {
	# A stream registers its two rings, 2 x 256 KiB: 1,200 KiB hold two.
	many_streams 6 300000 $(nobody 1200)
	grep -qx "6 streams echoed intact" rdma.txt
	[ "$(stat_of cli.log rdma)" -eq 2 ]
	[ "$(stat_of cli.log tcp)" -eq 4 ]
	[ "$(stat_of cli.log resources)" -eq 4 ]
	rdma_crossed 100
}

@test "limits: queue pairs exhausted (RSOCK_FAULT=create_qp:3+, the 3rd and later QP creations fail): of 5 streams at once the first 2 on RDMA, 3 on TCP counted 'resources', every echo intact" {
	many_streams 5 300000 env RSOCK_FAULT=create_qp:3+
	grep -qx "5 streams echoed intact" rdma.txt
	[ "$(stat_of cli.log rdma)" -eq 2 ]
	[ "$(stat_of cli.log tcp)" -eq 3 ]
	[ "$(stat_of cli.log resources)" -eq 3 ]
	rdma_crossed 100
}

# ---- descriptors -----------------------------------------------------------------

# fds_pair LIMIT STREAMS SECONDS: limits.py's fds client at RLIMIT_NOFILE
# LIMIT over kernel TCP (tcp.txt) and under librsock (rdma.txt, log cli.log),
# both shown; every stream each opened before EMFILE at socket() echoed
# intact; FDS_TCP and FDS_RDMA say how many.
fds_pair() {
	bounded "$3" $LP fds "$ADDR_B" "$SRV_PORT" "$1" "$2" >tcp.txt
	bounded "$3" env $(rsock_env cli) $LP fds "$ADDR_B" "$SRV_PORT" "$1" "$2" >rdma.txt
	sed 's/^/# tcp:  /' tcp.txt >&3
	sed 's/^/# rdma: /' rdma.txt >&3
	FDS_TCP=$(sed -n 's/^opened \([0-9]*\) then EMFILE at socket$/\1/p' tcp.txt)
	FDS_RDMA=$(sed -n 's/^opened \([0-9]*\) then EMFILE at socket$/\1/p' rdma.txt)
	grep -qx "$FDS_TCP echoed intact" tcp.txt
	grep -qx "$FDS_RDMA echoed intact" rdma.txt
}

@test "limits: RLIMIT_NOFILE 64 (below the library's descriptors at 512): socket() fails with EMFILE, the streams open keep working, new ones on TCP counted 'resources'" {
	local t r
	echo_srv
	fds_pair 64 100000 60
	t=$FDS_TCP r=$FDS_RDMA
	# None of the library's descriptors takes one of the application's
	# numbers: a stream's own, the process's (made with its first stream,
	# ho_prepare), the device's command and event descriptors (moved), and
	# nothing opened for a stream the limit leaves no room (ownfd_room).
	[ "$r" -eq "$t" ]
	stats_line cli.log | sed 's/^.*stats: /# /' >&3
	[ "$(stat_of cli.log rdma)" -eq 2 ]
	[ "$(stat_of cli.log tcp)" -eq $((r - 2)) ]
	[ "$(stat_of cli.log resources)" -eq $((r - 2)) ]
}

# Above 512 the library's descriptors share the numbers the application
# reaches last: two for each RDMA stream (the control connection's
# duplicate, the completion channel: design.md, "Lock order and
# lifetimes") and the process's own, from its first stream on.
@test "limits: RLIMIT_NOFILE 560 (above 512): EMFILE at socket() after as many streams as over kernel TCP less two for each RDMA stream and the process's own descriptors (at most 10), every echo intact" {
	local t r n
	echo_srv
	fds_pair 560 1000 120
	t=$FDS_TCP r=$FDS_RDMA
	n=$(stat_of cli.log rdma)
	stats_line cli.log | sed 's/^.*stats: /# /' >&3
	[ "$n" -ge 10 ]
	[ "$r" -le $((t - 2 * n)) ] && [ "$r" -ge $((t - 2 * n - 10)) ]
	[ "$(stat_of cli.log tcp)" -eq $((r - n)) ]
	[ "$(stat_of cli.log resources)" -eq $((r - n)) ]
}

# The clients probe, then stay on TCP without a hello: the server's threads
# each wait for it until the client's bytes come. A settling duplicate
# ("Choosing a path") held through that wait would be one more descriptor
# per stream: accept() would fail with EMFILE where kernel TCP's does not
# (the server then exits, its clients' streams reset).
@test "limits: a server at RLIMIT_NOFILE 600 using each stream at once, 540 clients at once that probe, then stay on TCP (RSOCK_FAULT=reg_mr:1+): every accept() succeeds as over kernel TCP, every echo intact" {
	SRV_PORT=$(free_port)
	start_bg srv prlimit --nofile=600 env $(rsock_env srv) $LP srv "$ADDR_B" "$SRV_PORT"
	local srv=$BG_PID
	wait_for_port "$SRV_PORT" 15 "$srv"
	bounded 90 $LP many "$ADDR_B" "$SRV_PORT" 540 1000 >tcp.txt
	bounded 120 env RSOCK_FAULT=reg_mr:1+ $(rsock_env cli) $LP many "$ADDR_B" "$SRV_PORT" 540 1000 >rdma.txt
	same_outcome
	grep -qx "540 streams echoed intact" rdma.txt
	kill -0 "$srv" || { cat srv.err >&2; return 1; }
	grep -q 'RSOCK_FAULT: reg_mr fails' cli.log
	[ "$(stat_of cli.log tcp)" -eq 540 ]
	[ "$(stat_of cli.log resources)" -eq 540 ]
}

# acc_at_limit LIMIT K [after]: limits.py's acc (RLIMIT_NOFILE LIMIT, before
# or after its listen()) and con (K streams), over kernel TCP (tcp.txt) and
# librsock (rdma.txt, the server's log srv-rdma.log).
acc_at_limit() {
	local run port
	for run in tcp rdma; do
		local pre=
		[ $run = rdma ] && pre="$(rsock_env "srv-$run")"
		rm -f "srv-$run.log" "cli-$run.log"
		port=$(free_port)
		start_bg "srv-$run" env $pre $LP acc "$ADDR_B" "$port" "$@"
		local srv=$BG_PID
		wait_for_port "$port" 15 "$srv"
		bounded 120 env ${pre:+$(rsock_env "cli-$run")} $LP con "$ADDR_B" "$port" "$2" 1000 >"cli-$run.out"
		wait_bg "$srv" 30
		cat "srv-$run.out" "cli-$run.out" >"$run.txt"
	done
	same_outcome
	grep -q '^accepted [0-9]* then EMFILE$' rdma.txt
	stats_line srv-rdma.log | sed 's/^.*stats: /# srv /' >&3
	ACCEPTED=$(sed -n 's/^accepted \([0-9]*\) .*/\1/p' rdma.txt)
	[ "$(stat_of srv-rdma.log tcp)" -eq "$ACCEPTED" ]
}

# Before listen(): no beacon (cm_listen), the clients find a plain server.
# After it: each stream's hello is refused ('resources') at its first use,
# or the client gave up waiting for the answer ('peer'), none settled by
# the library's thread, whose descriptor would take a number (conn.c).
@test "limits: RLIMIT_NOFILE 100 at a server, set before listen() or after it: accept() fails with EMFILE after as many streams as over kernel TCP, each echoed, on TCP counted 'resources'" {
	acc_at_limit 100 200
	[ "$(stat_of srv-rdma.log resources)" -eq "$ACCEPTED" ]
	acc_at_limit 100 200 after
	[ $(($(stat_of srv-rdma.log resources) + $(stat_of srv-rdma.log peer))) -eq "$ACCEPTED" ]
	[ "$(stat_of srv-rdma.log resources)" -ge 1 ]
}
