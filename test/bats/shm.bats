#!/usr/bin/env bats
# The same-host path (doc/design.md, "The same-host path"): two librsock
# processes of this host carry a stream through shared memory, by default.
# The differential programs (and sockcheck) run over it and must observe exactly what they do
# over kernel TCP (errno after every socket call included); the path is
# asserted per stream (rsock_fd_transport() = 4, RSOCK_TRANSPORT_SHM) and
# by the counters. A plain peer stays on TCP without delay.

load helpers

SHMPAIR=$RSOCK_SRC_DIR/test/bats/shmpair.py

setup_file() {
	require_build
	require_cmd python3 setpriv
}

setup() {
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	stop_all_bg
}

# shm_differential PROG ADDR: PROG over kernel TCP, then with
# the library (every stream asserted on the same-host path), outputs
# and errno behaviour compared; both processes counted same-host streams.
shm_differential() {
	local prog=$1 addr=$2 port
	port=$(free_port)
	bounded 120 env ERRNOWATCH_LOG="$PWD/tcp.errno" LD_PRELOAD="$ERRNOWATCH" \
		"$PROGS/$prog" "$addr" "$addr" "$port" >tcp.txt 2>tcp.err || {
		cat tcp.txt tcp.err >&2
		false
	}
	port=$(free_port)
	bounded 120 env RSOCK_EXPECT_TRANSPORT=4 RSOCK_STATS=1 \
		RSOCK_LOG_LEVEL=info RSOCK_LOG_FILE="$PWD/shm.log" ERRNOWATCH_LOG="$PWD/shm.errno" \
		LD_PRELOAD="$(rsock_preload_watched)" \
		"$PROGS/$prog" "$addr" "$addr" "$port" >shm.txt 2>shm.err || {
		cat shm.txt shm.err shm.log >&2
		false
	}
	diff -u tcp.txt shm.txt >&2
	errno_kept tcp.errno shm.errno
	# the server (the client is a child that leaves with _exit) counted them
	grep -q 'stats: streams tcp=[0-9]* rdma=[0-9]* shm=[1-9]' shm.log || { cat shm.log >&2; false; }
	echo "# $(wc -l <tcp.txt) observations identical over kernel TCP and the same-host path" >&3
}

@test "streamcheck over the same-host path (127.0.0.1) is kernel TCP's, every stream on shm" {
	shm_differential streamcheck 127.0.0.1
}

@test "streamcheck over the same-host path (::1) is kernel TCP's, every stream on shm" {
	shm_differential streamcheck ::1
}

@test "evcheck (poll, select, epoll level, edge, one-shot, nested) over the same-host path is kernel TCP's" {
	shm_differential evcheck 127.0.0.1
}

@test "threadcheck (threads sharing streams and epoll instances) over the same-host path is kernel TCP's" {
	shm_differential threadcheck 127.0.0.1
}

# pair SRV_ENV CLI_ENV [CLI_PREFIX...]: an echo of 1 MiB through shmpair.py (all written
# before any is read back: four rings' worth, the spill's case),
# each end under its environment ("plain": no library).
pair() {
	local srv=$1 cli=$2 port
	shift 2
	rm -f port
	if [ "$srv" = plain ]; then
		start_bg srv env -u LD_PRELOAD python3 "$SHMPAIR" server "$PWD" 127.0.0.1
	else
		start_bg srv env $srv LD_PRELOAD="$(rsock_preload_value)" python3 "$SHMPAIR" server "$PWD" 127.0.0.1 ${SRV_FORK:-}
	fi
	for _ in $(seq 1 200); do [ -s port ] && break; sleep 0.05; done
	port=$(cat port)
	if [ "$cli" = plain ]; then
		bounded "$@" env -u LD_PRELOAD python3 "$SHMPAIR" client 127.0.0.1 "$port" 1048576 >cli.out 2>cli.err
	else
		bounded "$@" env $cli LD_PRELOAD="$(rsock_preload_value)" python3 "$SHMPAIR" client 127.0.0.1 "$port" 1048576 >cli.out 2>cli.err
	fi
	wait_bg "$BG_PID"
	cat srv.out cli.out
	grep -qx 'client intact 1' cli.out
	grep -qx 'server echoed 1048576' srv.out
}

# test/rdma/limits.py's kill cases (a peer SIGKILLed with the survivor's
# bytes unread, or after reading them; the survivor's read, poll, epoll,
# getsockopt(SO_ERROR)) over kernel TCP and the same-host path.
@test "shm: a peer killed with our bytes unread or read: read, poll, epoll and SO_ERROR see what kernel TCP's show (a reset told once, else EOF)" {
	local cases="sendrst:100/read sendrst:100/poll sendrst:100/soerr sendrst:100/pollsoerr recv:100/read
		recv:10000/read recv:100/epoll recv:100/soerr send/read unread/read" port
	export PYTHONPATH=$RSOCK_SRC_DIR/test/rdma
	port=$(free_port 10) # (a port a case)
	# shellcheck disable=SC2086 # the cases split into words
	bounded 120 python3 "$PYTHONPATH/limits.py" kill 127.0.0.1 "$port" $cases >tcp.txt
	port=$(free_port 10)
	# shellcheck disable=SC2086
	bounded 120 env RSOCK_MODE=shm RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/shm.log" LD_PRELOAD="$RSOCK_LIB" \
		python3 "$PYTHONPATH/limits.py" kill 127.0.0.1 "$port" $cases >shm.txt
	diff -u tcp.txt shm.txt >&2
	grep -q 'SO_ERROR ECONNRESET then 0' shm.txt
	grep -q 'stats: streams tcp=0 rdma=0 shm=10 ' shm.log || { grep stats shm.log >&2; false; }
}

@test "shm: on by default; RSOCK_SHM=0, a use rdma rule, RSOCK_MODE=tcp keep a local stream off it" {
	pair RSOCK_LOG_LEVEL=warn RSOCK_LOG_LEVEL=warn
	grep -qx 'client transport 4' cli.out
	grep -qx 'server transport 4' srv.out
	# either end's word is enough
	pair RSOCK_SHM=0 RSOCK_LOG_LEVEL=warn
	grep -qx 'client transport 2' cli.out
	grep -qx 'server transport 2' srv.out
	pair RSOCK_LOG_LEVEL=warn RSOCK_SHM=0
	grep -qx 'client transport 2' cli.out
	echo 'use rdma * * *' >rdma.rules
	pair RSOCK_CONF=$PWD/rdma.rules RSOCK_LOG_LEVEL=warn
	grep -qx 'client transport 2' cli.out
	pair RSOCK_MODE=tcp RSOCK_LOG_LEVEL=warn
	grep -qx 'server transport 2' srv.out
	# a use shm rule and RSOCK_MODE=shm bring it back under RSOCK_SHM=0
	echo 'use shm * * *' >shm.rules
	pair "RSOCK_SHM=0 RSOCK_CONF=$PWD/shm.rules" "RSOCK_SHM=0 RSOCK_MODE=shm"
	grep -qx 'client transport 4' cli.out
	grep -qx 'server transport 4' srv.out
}

@test "shm: RSOCK_MODE=rdma takes the same-host path to a local librsock peer (no RDMA device needed)" {
	pair RSOCK_MODE=rdma RSOCK_MODE=rdma
	grep -qx 'client transport 4' cli.out
	grep -qx 'server transport 4' srv.out
}

@test "shm: a server that forks 0.2 s after accept() (set up by then) and closes its copy: the child serves the stream (moved to TCP), nothing lost" {
	SRV_FORK=fork pair RSOCK_LOG_LEVEL=warn RSOCK_LOG_LEVEL=warn
	grep -qx 'client transport 4' cli.out
}

@test "shm: a server that forks at once after accept() (PostgreSQL, inetd): the child sets the stream up, on shm" {
	SRV_FORK=forknow pair RSOCK_LOG_LEVEL=warn RSOCK_LOG_LEVEL=warn
	grep -qx 'client transport 4' cli.out
	grep -qx 'server transport 4' srv.out
}

@test "shm: a plain server, a librsock client: TCP at once (the local look refused, no wait)" {
	pair plain RSOCK_LOG_LEVEL=warn
	grep -qx 'client transport 2' cli.out
	grep -qx 'server transport -2' srv.out
	awk '/^client connect_ms/ { exit !($3 < 50) }' cli.out
}

@test "shm: a librsock server, a plain client: TCP from the first byte" {
	pair RSOCK_LOG_LEVEL=warn plain
	grep -qx 'server transport 2' srv.out
	grep -qx 'client transport -2' cli.out
	awk '/^client connect_ms/ { exit !($3 < 50) }' cli.out
}

@test "shm: the client as nobody, the server as root: the same-host path, credentials logged" {
	[ "$(id -u)" = 0 ] || { echo "needs root to run the client as another user" >&2; false; }
	chmod 0755 "$PWD"
	pair "RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE=$PWD/srv.log" RSOCK_LOG_LEVEL=warn \
		setpriv --reuid=nobody --regid=nogroup --clear-groups
	grep -qx 'client transport 4' cli.out
	grep -qx 'server transport 4' srv.out
	nobody=$(id -u nobody)
	grep -q "shm: set-up with client pid [0-9]* uid $nobody " srv.log
}

@test "sockcheck (fork, vfork, exec, stdio, sendfile, SCM_RIGHTS ...) over the same-host path prints what it prints without the library" {
	bounded env ERRNOWATCH_LOG="$PWD/plain.errno" LD_PRELOAD="$ERRNOWATCH" "$SOCKCHECK" >plain.out
	bounded env RSOCK_STATS=1 RSOCK_LOG_LEVEL=info RSOCK_LOG_FILE="$PWD/shm.log" \
		ERRNOWATCH_LOG="$PWD/shm.errno" LD_PRELOAD="$(rsock_preload_watched)" "$SOCKCHECK" >shm.out
	diff -u plain.out shm.out >&2
	errno_kept plain.errno shm.errno
	grep -q 'stats: streams tcp=[0-9]* rdma=[0-9]* shm=[1-9]' shm.log || { cat shm.log >&2; false; }
}

@test "shm: a reader that finds the ring empty, then the peer's end, reads the bytes the peer wrote in between (no early EOF)" {
	# shm_end_late: the client's reader looks for the end 50 ms after each
	# empty ring, in which the echoing server writes its last bytes and
	# closes: they are read before the end, every time.
	local i port
	for i in 1 2 3; do
		mkdir "d$i"
		start_bg "srv$i" env LD_PRELOAD="$(rsock_preload_value)" python3 "$SHMPAIR" server "$PWD/d$i" 127.0.0.1
		for _ in $(seq 1 200); do [ -s "d$i/port" ] && break; sleep 0.05; done
		port=$(cat "d$i/port")
		bounded 60 env RSOCK_FAULT=shm_end_late:1+=50 RSOCK_LOG_LEVEL=info RSOCK_LOG_FILE="$PWD/cli$i.log" \
			LD_PRELOAD="$(rsock_preload_value)" python3 "$SHMPAIR" client 127.0.0.1 "$port" 300000 >"cli$i.out"
		wait_bg "$BG_PID"
		echo "# stream $i: $(grep -c 'shm_end_late fails' "cli$i.log") late looks for the end" >&3
		grep -qx 'client transport 4' "cli$i.out"
		grep -qx 'client intact 1' "cli$i.out" || { cat "cli$i.out" "srv$i.out" "cli$i.log" >&2; false; }
		grep -qx 'server echoed 300000' "srv$i.out"
		grep -q 'RSOCK_FAULT: shm_end_late fails' "cli$i.log"
	done
}
