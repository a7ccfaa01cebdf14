#!/usr/bin/env bats
# Choosing a path for each stream (doc/design.md, "Choosing a path"), in the soft-RoCE guest or on a host with an RDMA device: the probe,
# the beacon and the hello settle every stream between two librsock
# processes on RDMA without the application waiting or reading a byte of
# them; every other peer (a plain TCP program, rsocket, no RDMA path, a closed
# port, a hostile peer) gets what kernel TCP gives it, IPv6 and dual-stack
# listeners included.
#
# Which path carried the bytes is asserted by librsock's own counters
# (RSOCK_STATS=1) and, where it matters, by the RDMA device's packet counters.

load ../bats/helpers
load rsock

# ---- the probe, the beacon and the hello ------------------------------------

@test "a client bound to 0.0.0.0 port 0 before connect (as dig does) is carried over RDMA, the server's first bytes its own" {
	require_cmd python3
	# bind(0.0.0.0:0) takes a port at once but leaves the address to
	# connect(): the probe must announce the route's source address, or
	# the server takes the stream for a plain client's and its application
	# reads the hello (unbound answered no query over TCP from dig).
	cat >w.py <<'PY'
import sys
from echoes import serve, echo_clients
role, b, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
msg = b"first bytes of the client " * 1000
if role == "srv":
    serve(b, port, msg, 3)
else:
    echo_clients(b, port, msg, 3, bind=("0.0.0.0", 0))
PY
	echo_pair w.py
	stats_only_rdma cli.log
	stats_only_rdma srv.log
}

@test "a process's first RDMA stream loads only its devices' verbs provider, not every one installed" {
	require_cmd python3
	# libibverbs loads every installed provider (seventeen in Debian's
	# ibverbs-providers) when a device matches none already loaded;
	# rdma-core's loading (base/rdmacore.c) loads the one the devices here
	# need first, and nothing else is mapped.
	local want n
	n=$(ls /sys/class/infiniband | sed 's/[0-9]*$//; s/_*$//' | sort -u | wc -l)
	[ "$n" = 1 ] || skip "devices of more than one kind here"
	want=$(ls /sys/class/infiniband | head -n 1 | sed 's/[0-9]*$//; s/_*$//')
	cat >w.py <<'PY'
import re, sys, echoes
if sys.argv[1] == "srv":
    echoes.serve(sys.argv[2], int(sys.argv[3]), b"x" * 1000, 3)
else:
    echoes.echo_clients(sys.argv[2], int(sys.argv[3]), b"x" * 1000, 3)
    maps = open("/proc/self/maps").read()
    libs = sorted(set(re.findall(r"/lib([a-z0-9_]+)-rdmav[0-9]+\.so", maps)))
    open("providers", "w").write(" ".join(libs) + "\n")
PY
	echo_pair w.py
	stats_only_rdma cli.log
	echo "mapped: $(cat providers), wanted: $want"
	[ "$(cat providers)" = "$want" ]
}

@test "the beacon's data port hint: right (the listening process accepts) and wrong (another process accepts), every stream over RDMA" {
	require_cmd python3
	# The beacon tells a client the data listener's port of the process
	# that listens, so that the client resolves its data connection while
	# the hello makes its round trip. Here the server forks before it ever
	# touches RDMA; the parent accepts the 1st and 3rd streams, the child
	# the 2nd, for which the parent's hint is wrong: the client must then
	# resolve again towards the port HELLO_ACK names.
	cat >h.py <<'PY'
import os, sys
from echoes import listener, serve_one, echo_clients
role, b, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
msg = b"hinted " * 20000
if role == "srv":
    l = listener(b, port)
    go, done = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        os.read(go[0], 1)
        serve_one(l, msg)
        os.write(done[1], b"x")
        os._exit(0)
    serve_one(l, msg)
    os.write(go[1], b"x")
    os.read(done[0], 1)
    serve_one(l, msg)
    os.waitpid(pid, 0)
else:
    echo_clients(b, port, msg, 3)
PY
	echo_pair h.py RSOCK_LOG_LEVEL=debug
	stats_only_rdma cli.log
	stats_rdma cli.log 420000 tx
	[[ "$(stats_line cli.log)" == *"streams tcp=0 rdma=3 "* ]]
	# no listener yet at the first probe, then the parent's (twice)
	run grep -oE 'probe from port [0-9]+ to port [0-9]+ \(data port [0-9]+\)' srv.log
	[ "${#lines[@]}" = 3 ]
	[[ "${lines[0]}" == *"(data port 0)" ]]
	[[ "${lines[1]}" != *"(data port 0)" && "${lines[1]##* }" == "${lines[2]##* }" ]]
	# the child's stream was resolved again; the third used the hint
	[ "$(grep -c 'data connection: resolved again' cli.log)" = 1 ] || { cat cli.log >&2; false; }
}

# reuseport_srv NAME PORT N [VAR=VAL...]: test/rdma/reuseport.py with N
# listeners on B:PORT, under librsock (its log NAME.log), once they listen.
reuseport_srv() {
	local name=$1 port=$2 n=$3 i
	shift 3
	start_bg "$name" env $(rsock_env "$name") "$@" python3 "$BATS_TEST_DIRNAME/reuseport.py" \
		srv "$ADDR_B" "$port" "$n"
	for i in $(seq 1 100); do
		grep -q listening "$name.out" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "$name: not listening after 10 s" >&2
	return 1
}

@test "listeners of one port with SO_REUSEPORT, in three processes and two in one: the beacon of one answers for all, every stream is intact and over RDMA" {
	local port k
	port=$(free_port)
	# One process holds the port's beacon; the kernel hands each stream to
	# any of the four listeners. The tuple table the processes share tells
	# a listener without the beacon about its streams; without it, that
	# listener would read the client's hello as the request.
	for k in 1 2 3; do
		reuseport_srv "srv$k" "$port" $((k == 1 ? 2 : 1))
	done
	run bounded 120 env $(rsock_env cli) python3 "$BATS_TEST_DIRNAME/reuseport.py" \
		cli "$ADDR_B" "$port" "$ADDR_A" 16
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" =~ bad\ 0\ servers\ ([0-9]+) ]]
	[ "${BASH_REMATCH[1]}" -ge 2 ]
	stats_only_rdma cli.log
	# the table: the user's own, readable by nobody else
	local ns table
	ns=$(readlink /proc/self/ns/net)
	ns=${ns#*[}
	table=/dev/shm/librsock-tuples.2.$(id -u).${ns%]}
	[ "$(stat -c '%a %u' "$table")" = "600 $(id -u)" ]
	# One not made so (another user could have put it there first) is not
	# used: the process takes a private table and says so.
	stop_all_bg
	rm -f "$table"
	install -m 0644 /dev/null "$table"
	reuseport_srv srv4 "$(free_port)" 1 RSOCK_LOG_LEVEL=debug
	run cat srv4.log
	[ ! -s "$table" ] # (not grown to a table either)
	rm -f "$table"
	grep -q 'tuple table: a private one' <<<"$output"
}

@test "a server that accepts late gets exactly what its clients wrote and closed meanwhile, no hand-shake bytes; clients that write and close at once lose nothing" {
	require_cmd python3
	# test/rdma/lateaccept.py: 4 clients connect, write and close while
	# the server sleeps past their hello's time-out (RSOCK_HANDSHAKE_MS
	# 300 ms, the server's sleep 1.5 s); each stream then brings exactly
	# its message. The peer's FIN must not make the server take the hello
	# for one another process answered: the client's hello and cancel would
	# reach the application as data.
	local port
	port=$(free_port)
	start_bg late env LD_PRELOAD="$(rsock_preload_value)" RSOCK_HANDSHAKE_MS=300 \
		python3 "$BATS_TEST_DIRNAME/lateaccept.py" srv "$ADDR_B" "$port" 4 1.5
	wait_for_port "$port" 15 "$BG_PID"
	bounded 60 env LD_PRELOAD="$(rsock_preload_value)" RSOCK_HANDSHAKE_MS=300 \
		python3 "$BATS_TEST_DIRNAME/lateaccept.py" cli "$ADDR_B" "$port" 4
	wait_bg "$BG_PID" 30
	cat late.out
	grep -qx "whole 4 of 4" late.out
	# test/rdma/quickclose.py: 500 clients that connect, write 10 bytes
	# and close at once. In about one in a thousand such streams the
	# client's DREQ overtakes its RTU at the server, which must then take
	# the stream as connected: waiting out the hand-shake would leave it on
	# TCP and lose the bytes written over RDMA (streamcheck's MSG_TRUNC
	# scenario, a client that writes 10 bytes and closes, meets it too).
	port=$(free_port)
	start_bg quick env LD_PRELOAD="$(rsock_preload_value)" RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/quick-srv.log" \
		python3 "$BATS_TEST_DIRNAME/quickclose.py" srv "$ADDR_B" "$port" 500
	wait_for_port "$port" 15 "$BG_PID"
	bounded 120 env LD_PRELOAD="$(rsock_preload_value)" \
		python3 "$BATS_TEST_DIRNAME/quickclose.py" cli "$ADDR_B" "$port" 500
	wait_bg "$BG_PID" 60
	cat quick.out
	grep -qx "whole 500 of 500" quick.out
	stats_only_rdma quick-srv.log
}

# nb_pair NAME N DELAY MODE [VAR=VALUE...]: test/rdma/nbclient.py's server
# (accepting DELAY s after each connection is queued) and client (MODE nb
# or block, with the variables), N streams, both with librsock; logs in
# NAME-srv.log and NAME-cli.log, the client's output in NAME-cli.out.
nb_pair() {
	local port
	port=$(free_port)
	start_bg "$1" env LD_PRELOAD="$(rsock_preload_value)" RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/$1-srv.log" \
		python3 "$BATS_TEST_DIRNAME/nbclient.py" srv "$ADDR_B" "$port" "$2" "$3"
	wait_for_port "$port" 15 "$BG_PID"
	bounded 60 env LD_PRELOAD="$(rsock_preload_value)" RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/$1-cli.log" "${@:5}" \
		python3 "$BATS_TEST_DIRNAME/nbclient.py" cli "$ADDR_B" "$port" "$2" "$4" >"$1-cli.out"
	wait_bg "$BG_PID" 30
	cat "$1-cli.out"
	grep -qx "intact $2 of $2" "$1-cli.out"
}

@test "a non-blocking client of a server that accepts late is not held up: each call returns at once (the stream stays on TCP), nothing is lost; a prompt or blocking one gets RDMA" {
	require_cmd python3
	# test/rdma/nbclient.py: an event loop's client (non-blocking
	# socket, select) writes a 6 KB request and reads the answer, to an
	# iterative server that sleeps before each accept(). Kernel TCP
	# takes the request at once; the library's first use of the stream
	# waits for the server's answer to the hello, which a server that
	# accepts late gives late. Rather than stop the event loop for up to
	# RSOCK_HANDSHAKE_MS (2 s), a non-blocking socket waits at most
	# RSOCK_NONBLOCK_MS (1 s by default, 100 ms here), then TCP.
	local d
	nb_pair nbl 2 1.2 nb RSOCK_NONBLOCK_MS=100
	[ "$(sed -n 's/^longest call //p' nbl-cli.out)" -lt 600 ]
	stats_tcp nbl-cli.log peer
	# Around the bound (the server's answer may come just after the
	# client gave up: a late answer heads its TCP stream, and a
	# non-blocking read must not return it): whichever path, intact.
	for d in 0.08 0.1 0.12; do
		nb_pair nbm 3 "$d" nb RSOCK_NONBLOCK_MS=100
	done
	# The default bound: a server 2.5 s late (beyond the handshake's
	# bound too), the client held about a second at most.
	nb_pair nbd 1 2.5 nb
	[ "$(sed -n 's/^longest call //p' nbd-cli.out)" -lt 1800 ]
	stats_tcp nbd-cli.log peer
	# A server that accepts at once: the non-blocking client's streams
	# are RDMA at both ends.
	nb_pair nbp 3 0 nb
	stats_only_rdma nbp-cli.log
	stats_only_rdma nbp-srv.log
	# A blocking client waits for a server that accepts within
	# RSOCK_HANDSHAKE_MS, and gets RDMA.
	nb_pair nbb 1 0.5 block
	stats_only_rdma nbb-cli.log
	stats_only_rdma nbb-srv.log
}

@test "a hostile peer cannot write into another stream's ring (one protection domain per stream); a protocol violation resets the stream, its peer told at once" {
	# test/progs/keycheck.c speaks the negotiation itself, opens two streams
	# to a librsock echo server and aims an RDMA WRITE through stream 1's QP
	# at stream 2's ring with stream 2's key: the server's device must refuse
	# it, stream 1 must end like a reset TCP stream, stream 2 must go on.
	# On a third stream it sends 4 bytes, then data beyond the ring: the
	# server's application reads the 4 bytes, then ECONNRESET (not EPROTO,
	# which no TCP read returns), and the hostile peer's TCP connection is
	# reset at once (not ended cleanly once the application closes, which
	# would hide the break from the peer).
	local port
	port=$(free_port)
	start_bg srv env RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		"$PROGS/keycheck" server "$ADDR_B" "$port" 3
	local srv=$BG_PID
	wait_for_port "$port" 15 "$srv"
	run bounded 30 "$PROGS/keycheck" client "$ADDR_B" "$port" "$ADDR_A"
	echo "$output"
	[[ "$output" == *"cross-stream write: refused"* ]]
	[[ "$output" == *"stream 2: echo ok"* ]]
	[ "$status" -eq 0 ]
	wait_bg "$srv" 20
	cat "$BATS_TEST_TMPDIR/srv.out"
	grep -q 'carried by RDMA' srv.log
	# stream 1 ends as a reset (or EOF) for the server, stream 2 echoed its 4 bytes
	grep -Eq '^conn 1: (error ECONNRESET|eof) after 0 bytes$' "$BATS_TEST_TMPDIR/srv.out"
	grep -Eq '^conn 2: (eof|error ECONNRESET) after 4 bytes$' "$BATS_TEST_TMPDIR/srv.out"
	[[ "$output" == *"stream 3: TCP ECONNRESET"* ]]
	grep -Eq '^conn 3: error ECONNRESET after 4 bytes$' "$BATS_TEST_TMPDIR/srv.out"
	grep -q 'the peer wrote beyond its credit: the stream is reset' srv.log
}

# ---- mixed peers and fallback -----------------------------------------------

@test "plain TCP client to a librsock server: works, on TCP" {
	local port
	rand_file data 3000000
	port=$(free_port)
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		sh -c "exec nc -l -s $ADDR_B -p $port >got"
	wait_for_port "$port" 15 "$BG_PID"
	bounded 30 env -u LD_PRELOAD nc -N -s "$ADDR_A" "$ADDR_B" "$port" <data
	wait_bg "$BG_PID" 30
	same_file data got "plain client -> librsock server"
	stats_tcp srv.log peer
}

@test "librsock client to a plain server that speaks first: works, on TCP, no stray bytes" {
	local port
	port=$(free_port)
	# The server greets, then echoes back what it receives: it must see
	# exactly the application's bytes, nothing of the negotiation.
	start_bg srv env -u LD_PRELOAD python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
c, _ = s.accept(); c.sendall(b"220 hello\r\n")
got = b""
while True:
    b = c.recv(65536)
    if not b: break
    got += b
open("seen", "wb").write(got); c.sendall(b"bye " + str(len(got)).encode() + b"\n"); c.close()
' "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	printf 'QUIT\r\n' >msg
	bounded 30 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		nc -N -s "$ADDR_A" "$ADDR_B" "$port" <msg >reply
	wait_bg "$BG_PID" 30
	same_file msg seen "what the plain server saw"
	[ "$(cat reply)" = "$(printf '220 hello\r\nbye 6')" ]
	stats_tcp cli.log peer
}

@test "librsock client to a plain server that waits for the client: works, on TCP" {
	local port
	rand_file data 1000000
	port=$(free_port)
	start_bg srv env -u LD_PRELOAD sh -c "exec nc -l -s $ADDR_B -p $port >got"
	wait_for_port "$port" 15 "$BG_PID"
	bounded 30 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		nc -N -s "$ADDR_A" "$ADDR_B" "$port" <data
	wait_bg "$BG_PID" 30
	same_file data got "librsock client -> plain server"
	stats_tcp cli.log peer
}

@test "rsocket's preload library as the other end: its client reaches a librsock server (on TCP, its own fallback), a librsock client of its server is refused as any TCP client is, and that server still serves rsocket" {
	local rs port i mode
	rs=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -n 1)
	[ -n "$rs" ] || { echo "librspreload.so (librdmacm1) is not installed" >&2; false; }
	# sockbench's sockets are plain socket() calls, which rsocket takes
	build_sockbench
	# An rsocket client's connect request reaches the beacon, which refuses
	# it; rsocket then connects over TCP, a plain client to librsock.
	port=$(free_port)
	start_bg srv env $(rsock_env srv) ./sb server "$ADDR_B" "$port" 1
	wait_for_port "$port" 15 "$BG_PID"
	run bounded 30 env LD_PRELOAD="$rs" ./sb pingpong "$ADDR_B" "$port" "$ADDR_A" 64 100
	echo "$output"
	[ "$status" -eq 0 ]
	wait_bg "$BG_PID" 30
	stats_tcp srv.log peer
	# An rsocket server listens on rdma_cm only: a TCP client is refused.
	# librsock's probe reaches its listener, which must not take it for
	# one of its own clients, and the SYN is refused as a plain one's is.
	port=$(free_port)
	start_bg rsrv env LD_PRELOAD="$rs" ./sb server "$ADDR_B" "$port" 1
	for i in $(seq 1 100); do
		rdma resource show cm_id 2>/dev/null | grep -qE "state LISTEN .*:$port( |$)" && break
		sleep 0.1
	done
	for mode in plain preload; do
		run bounded 30 in_mode "$mode" ./sb pingpong "$ADDR_B" "$port" "$ADDR_A" 64 10
		echo "$mode: $output"
		[ "$status" -ne 0 ]
		[[ "$output" == *"connect: Connection refused"* ]]
	done
	run bounded 30 env LD_PRELOAD="$rs" ./sb pingpong "$ADDR_B" "$port" "$ADDR_A" 64 100
	echo "rsocket: $output"
	[ "$status" -eq 0 ]
	wait_bg "$BG_PID" 30
}

@test "a second connect to the same plain peer adds no probe (negative cache)" {
	local port i
	port=$(free_port)
	start_bg srv env -u LD_PRELOAD python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
for i in range(2):
    c, _ = s.accept(); c.sendall(b"x"); c.close()
' "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	# One process, two connects: the second must not probe again.
	bounded 30 env RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/cli.log" \
		LD_PRELOAD="$(rsock_preload_value)" python3 -c '
import socket, sys
for i in range(2):
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), source_address=(sys.argv[3], 0))
    assert c.recv(1) == b"x"; c.close()
' "$ADDR_B" "$port" "$ADDR_A"
	wait_bg "$BG_PID" 30
	[ "$(grep -c 'probe of port' cli.log)" -eq 1 ] || {
		cat cli.log >&2
		false
	}
	stats_tcp cli.log peer
}

@test "a second process connecting to the same plain peer adds no probe (shared negative cache); the probe opens no device" {
	local port i ns file
	port=$(free_port)
	start_bg srv env -u LD_PRELOAD python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
for i in range(3):
    c, _ = s.accept(); c.sendall(b"x"); c.close()
' "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	ns=$(readlink /proc/self/ns/net)
	ns=${ns#*[}
	file=/dev/shm/librsock-negcache.1.$(id -u).${ns%]}
	# Three processes, one connect each, as command-line tools make them
	# (no bind); the first under strace, which shows what it opened.
	local pre
	for i in 1 2 3; do
		pre=(env "LD_PRELOAD=$(rsock_preload_value)")
		[ "$i" = 1 ] && pre=(strace -f -o "$PWD/cli1.trace" -e trace=openat -E "LD_PRELOAD=$(rsock_preload_value)")
		[ "$i" = 3 ] && { rm -f "$file"; install -m 0644 /dev/null "$file"; }
		bounded 30 env RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/cli$i.log" "${pre[@]}" \
			python3 -c '
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
assert c.recv(1) == b"x"; c.close()
' "$ADDR_B" "$port"
		[ "$i" != 1 ] || [ "$(stat -c '%a %u' "$file")" = "600 $(id -u)" ]
	done
	wait_bg "$BG_PID" 30
	grep -c 'probe of port' cli1.log cli2.log cli3.log >&2 || true
	[ "$(grep -c 'probe of port' cli1.log)" -eq 1 ]
	[ "$(grep -c 'probe of port' cli2.log)" -eq 0 ] # learned from the first process
	[ "$(grep -c 'probe of port' cli3.log)" -eq 1 ] # a file others may read is not used (nor written)
	[ ! -s "$file" ]
	rm -f "$file"
	stats_tcp cli1.log peer
	stats_tcp cli2.log peer
	# A plain peer costs no verbs device, no provider, no rings
	[ "$(grep -cE 'uverbs|libibverbs/' cli1.trace)" -eq 0 ]
	[ "$(grep -c 'rings.*registered' cli1.log)" -eq 0 ]
}

@test "no RDMA path (loopback, a netdev without RDMA): kernel TCP at once" {
	local port addr
	for addr in 127.0.0.1 "$ADDR_PLAIN_PEER"; do
		port=$(free_port)
		rand_file data 100000
		start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
			sh -c "exec nc -l -s $addr -p $port >got"
		wait_for_port "$port" 15 "$BG_PID"
		# decided from the routing table and sysfs: no device opened, no
		# provider loaded, no connection manager asked
		bounded 30 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" strace -f -o "$PWD/cli.trace" \
			-e trace=openat -E LD_PRELOAD="$(rsock_preload_value)" nc -N "$addr" "$port" <data
		wait_bg "$BG_PID" 30
		same_file data got "over $addr"
		stats_tcp cli.log no_device
		[ "$(grep -cE '/dev/infiniband|libibverbs/' cli.trace)" -eq 0 ]
		rm -f cli.log cli.trace srv.log got
	done
}

@test "an address without RDMA, again: the next process takes the negative cache, not the local check, and counts no_device" {
	local port
	port=$(free_port)
	start_bg srv python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4)
for i in range(2):
    c, _ = s.accept(); c.sendall(b"x"); c.close()
' "$ADDR_PLAIN_PEER" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	for i in 1 2; do
		bounded 30 env RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/cli$i.log" \
			strace -f -o "$PWD/cli$i.trace" -e trace=openat -E LD_PRELOAD="$(rsock_preload_value)" \
			python3 -c '
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
assert c.recv(1) == b"x"; c.close()
' "$ADDR_PLAIN_PEER" "$port"
	done
	wait_bg "$BG_PID" 30
	stats_tcp cli1.log no_device
	stats_tcp cli2.log no_device
	# the first walked sysfs; the second found the verdict in the shared file
	[ "$(grep -c '/sys/class/infiniband' cli1.trace)" -ge 1 ]
	[ "$(grep -c '/sys/class/' cli2.trace)" -eq 0 ]
	grep -q 'the negative cache' cli2.log
	[ "$(grep -cE 'uverbs|librdmacm|libibverbs' cli1.trace cli2.trace | awk -F: '{ s += $2 } END { print s }')" -eq 0 ]
}

@test "closed port: ECONNREFUSED, as fast as kernel TCP" {
	local port mode
	port=$(free_port)
	for mode in plain preload; do
		run bounded 30 in_mode "$mode" python3 -c '
import errno, socket, sys, time
t = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), source_address=(sys.argv[3], 0))
    print("connected")
except OSError as e:
    print(errno.errorcode[e.errno], round(time.monotonic() - t, 3))
' "$ADDR_B" "$port" "$ADDR_A"
		echo "$mode: $output"
		[ "$status" -eq 0 ]
		[[ "$(grep -E '^(ECONN|connected)' <<<"$output")" =~ ^ECONNREFUSED\ ([0-9.]+)$ ]]
		# refused as fast as TCP: within half the probe bound (the
		# ASan pass sets a longer one, as its programs run slower),
		# where waiting the probe out would take all of it
		awk -v t="${BASH_REMATCH[1]}" -v p="${RSOCK_PROBE_MS:-1500}" 'BEGIN { exit !(t < p / 2000) }'
	done
}

@test "RSOCK_MODE=rdma: a plain peer is a clear error, not a silent fallback" {
	local port
	port=$(free_port)
	start_bg srv env -u LD_PRELOAD sh -c "exec nc -l -s $ADDR_B -p $port >/dev/null"
	wait_for_port "$port" 15 "$BG_PID"
	run bounded 30 env RSOCK_MODE=rdma LD_PRELOAD="$(rsock_preload_value)" nc -N -s "$ADDR_A" "$ADDR_B" "$port" </dev/null
	echo "$output"
	[ "$status" -ne 0 ]
}

# ---- IPv6 and dual-stack listeners ------------------------------------------

@test "nc over IPv6: 20 MB over RDMA, checksum equal, the peer's IPv6 address seen" {
	require_cmd nc
	require_ipv6_env
	rdma_snapshot
	nc_upload "$ADDR_B6" "$ADDR_A6" 20000000
	grep -qF "$ADDR_A6" srv.err || { cat srv.err >&2; false; }
	rdma_crossed 2000
}

@test "a dual-stack [::] listener (python3 -m http.server) serves IPv4, IPv6 and IPv4-mapped clients over RDMA" {
	require_cmd python3
	require_ipv6_env
	local port c
	mkdir www
	rand_file www/blob 3000000
	port=$(free_port)
	rdma_snapshot
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		python3 -m http.server -b :: -d www "$port"
	wait_for_port "$port" 15 "$BG_PID"
	for c in "$ADDR_B" "[$ADDR_B6]"; do
		bounded 60 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
			python3 "$RSOCK_SRC_DIR/test/bats/fetch.py" "http://$c:$port/blob" got
		same_file www/blob got "GET over $c"
		stats_only_rdma cli.log
		stats_rdma cli.log 3000000 rx
		rm -f cli.log got
	done
	# an AF_INET6 client socket dialling the IPv4-mapped ::ffff:B
	bounded 60 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.connect(("::ffff:" + sys.argv[1], int(sys.argv[2])))
s.sendall(b"GET /blob HTTP/1.0\r\n\r\n")
b = bytearray()
while True:
    d = s.recv(65536)
    if not d:
        break
    b += d
open("got", "wb").write(b[b.index(b"\r\n\r\n") + 4:])
' "$ADDR_B" "$port"
	same_file www/blob got "GET over ::ffff:$ADDR_B from an AF_INET6 socket"
	stats_only_rdma cli.log
	stats_rdma cli.log 3000000 rx
	# the server saw the IPv4 clients as ::ffff:A and the other as A6, all over RDMA
	grep -qF "::ffff:$ADDR_A" srv.err || { cat srv.err >&2; false; }
	grep -qF "$ADDR_A6" srv.err || { cat srv.err >&2; false; }
	rdma_crossed 1000
}

@test "an AF_INET6 listener bound to the IPv4-mapped ::ffff:B (as Java binds) serves a mapped client over RDMA" {
	require_cmd python3
	local port
	rand_file data 3000000
	port=$(free_port)
	cat >m.py <<'PY'
import socket, sys, threading
from echoes import echo_to_eof
role, a, b, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if role == "srv":
    l = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("::ffff:" + b, port))
    l.listen(4)
    c, peer = l.accept()
    print("peer", peer[0], flush=True)
    echo_to_eof(c)
else:
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.bind(("::ffff:" + a, 0))
    s.connect(("::ffff:" + b, port))
    data = open("data", "rb").read()
    def send():
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    # (Sending it all before reading, which relies on the buffers of
    # both ends, is echoall.py's test.)
    w = threading.Thread(target=send)
    w.start()
    got = bytearray()
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    w.join()
    open("got", "wb").write(got)
PY
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" python3 m.py srv "$ADDR_A" "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	bounded 60 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" python3 m.py cli "$ADDR_A" "$ADDR_B" "$port"
	same_file data got "echo through a listener on ::ffff:$ADDR_B"
	grep -qF "peer ::ffff:$ADDR_A" srv.out || { cat srv.out srv.err >&2; false; }
	stats_only_rdma cli.log
	stats_rdma cli.log 3000000 rx
}
