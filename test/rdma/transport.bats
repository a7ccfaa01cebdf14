#!/usr/bin/env bats
# The RDMA stream transport (doc/design.md sections 8-9), in the soft-RoCE
# guest or on a host with an RDMA device: real, unmodified programs carry
# their bytes over RDMA between two librsock processes, the application sees
# exactly what kernel TCP gives it, and every mixed-peer case falls back to
# kernel TCP without the application noticing.
#
# Which path carried the bytes is asserted twice: by librsock's own counters
# (RSOCK_STATS=1) and by the RDMA device's packet counters.

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

# echo_pair SCRIPT [VAR=VALUE...]: `python3 SCRIPT srv ADDR_B PORT` in the
# background and `python3 SCRIPT cli ADDR_B PORT`, both under librsock with
# the given variables (logs srv.log and cli.log, test/rdma/echoes.py on the
# path); the server must print "intact" 3 times.
echo_pair() {
	local script=$1 port
	shift
	port=$(free_port)
	start_bg srv env RSOCK_STATS=1 "$@" RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" python3 "$script" srv "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	bounded 60 env RSOCK_STATS=1 "$@" RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" python3 "$script" cli "$ADDR_B" "$port"
	wait_bg "$BG_PID" 30
	[ "$(grep -c '^intact$' srv.out)" = 3 ] || { cat srv.out srv.err >&2; false; }
}

# subproc_pair SERVER...: the server (SERVER ADDR PORT: subproc.py's srv
# or spawnvm, both spawning children that share its memory) and subproc.py's
# client, both under librsock: the client's exchange completes, its 500 kB
# came back over RDMA, and neither end found application bytes where the
# control connection's messages should be.
subproc_pair() {
	local port
	port=$(free_port)
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		"$@" "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	run bounded 60 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		python3 "$BATS_TEST_DIRNAME/subproc.py" cli "$ADDR_B" "$port"
	echo "$output"
	[ "$status" = 0 ] || { bg_output "$BG_PID"; false; }
	wait_bg "$BG_PID" 30
	stats_rdma cli.log 500000 rx
	! grep -q 'unexpected bytes' cli.log srv.log || false
}

# nc_upload SERVER_ADDR CLIENT_ADDR BYTES: an nc client at CLIENT_ADDR sends
# BYTES random bytes (the file `data`) to `nc -l` at SERVER_ADDR, both under
# librsock; the bytes arrive intact and both ends counted them over RDMA. The
# server's stderr (srv.err) names the client (-v, -n: no name lookups).
nc_upload() {
	local srv=$1 cli=$2 n=$3 port
	rand_file data "$n"
	port=$(free_port)
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		sh -c "exec nc -n -v -l -s $srv -p $port >got"
	wait_for_port "$port" 15 "$BG_PID"
	bounded 120 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		nc -N -s "$cli" "$srv" "$port" <data
	wait_bg "$BG_PID" 60
	same_file data got "nc $cli -> $srv"
	stats_rdma cli.log "$n" tx
	stats_rdma srv.log "$n" rx
}

# ---- the differential semantics suite ------------------------------------------

@test "streamcheck: the application observes the same over RDMA as over kernel TCP" {
	differential streamcheck
	# scenario 15's large writes went from the server's own buffers (its
	# counters at exit; at least the two 3 MiB writes less their tails)
	local z
	z=$(grep -o 'zcopy=[0-9]*' rdma.log | cut -d= -f2 | sort -n | tail -1)
	echo "# ${z:-0} bytes sent without the copy" >&3
	[ "${z:-0}" -ge $((6 * 1024 * 1024 - 2 * 32768)) ]
}

@test "streamcheck over IPv6: the same observations over RDMA (RoCEv2 on IPv6) as over kernel TCP" {
	require_ipv6_env
	differential streamcheck "$ADDR_B6" "$ADDR_A6"
}

# ---- real programs over RDMA ------------------------------------------------------

@test "nc over IPv6: 20 MB over RDMA, checksum equal, the peer's IPv6 address seen" {
	require_cmd nc
	require_ipv6_env
	rdma_snapshot
	nc_upload "$ADDR_B6" "$ADDR_A6" 20000000
	grep -qF "$ADDR_A6" srv.err || { cat srv.err >&2; false; }
	rdma_crossed 2000
}

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
	# accepts a stream only once the one before it sent its header. When
	# connect() waited for the hello's answer, the second connect() waited
	# the whole handshake bound (2 s) and its stream stayed on TCP.
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

@test "a client bound to 0.0.0.0 port 0 before connect (as dig does) is carried over RDMA, the server's first bytes its own" {
	require_cmd python3
	# bind(0.0.0.0:0) takes a port at once but leaves the address to
	# connect(): the probe must announce the route's source address, or
	# the server takes the stream for a plain client's and its application
	# reads the hello (unbound answered no query over TCP from dig).
	cat >w.py <<'PY'
import sys
from echoes import listener, serve_one, echo_clients
role, b, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
msg = b"first bytes of the client " * 1000
if role == "srv":
    l = listener(b, port)
    for _ in range(3):
        serve_one(l, msg)
else:
    echo_clients(b, port, msg, 3, bind=("0.0.0.0", 0))
PY
	echo_pair w.py
	stats_only_rdma cli.log
	stats_only_rdma srv.log
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

@test "two processes share a stream accepted before either used it (vsftpd's session): the second does not wait for a hello the first answered" {
	require_cmd python3
	local port
	port=$(free_port)
	# vsftpd forks its session's privileged and unprivileged processes
	# before either touches the stream; the first answered the hello (and
	# stayed on TCP: it had changed its credentials), and the second then
	# waited for one until the handshake bound, 4 s a session. Here the
	# first declines RDMA by writing through stdio (fdopen).
	cat >v.py <<'PY'
import ctypes, os, socket, sys, time
from echoes import listener
role, b, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "srv":
    l = listener(b, port)
    c, _ = l.accept()
    if os.fork() == 0:
        go = os.pipe()
        if os.fork() == 0:          # the second process
            os.read(go[0], 1)
            line = c.makefile("rb").readline()
            c.sendall(b"echo " + line)
            os._exit(0)
        libc = ctypes.CDLL(None)    # the first use, through stdio: the hello
        libc.fdopen.restype = ctypes.c_void_p   # is answered with a refusal
        libc.fputs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        libc.fflush.argtypes = [ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
        fp = libc.fdopen(os.dup(c.fileno()), b"w")
        libc.fputs(b"220 ready\n", fp)
        libc.fflush(fp)
        libc.fclose(fp)
        os.write(go[1], b"x")
        os.wait()
        os._exit(0)
    c.close()
    os.wait()
else:
    t = time.time()
    s = socket.create_connection((b, port))
    f = s.makefile("rb")
    assert f.readline() == b"220 ready\n"
    s.sendall(b"USER anonymous\n")
    assert f.readline() == b"echo USER anonymous\n"
    print("session %.2f s" % (time.time() - t))
PY
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/srv.log" \
		LD_PRELOAD="$(rsock_preload_value)" PYTHONPATH="$BATS_TEST_DIRNAME" python3 v.py srv "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	run bounded 30 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" python3 v.py cli "$ADDR_B" "$port"
	echo "$output"
	[ "$status" = 0 ]
	wait_bg "$BG_PID" 30
	# well under the 4 s handshake bound the second process waited before
	awk '/^session/ { exit !($2 < 2.0) }' <<<"$output"
	grep -q 'another process answered the hello already' srv.log || { cat srv.log >&2; false; }
}

@test "a server that closes every descriptor it did not open (close_range, a close() loop) keeps serving over RDMA: the library's own are not the application's" {
	require_cmd python3
	# varnishd's manager calls closefrom(3) after it listened: that closed
	# the library's event channels, and the numbers, reused for its pid
	# file, then received the cm thread's commands (a spin, a corrupt
	# file, a hang at its next fork). To the application the library's
	# descriptors are not open: close() says EBADF, close_range() and
	# closefrom() pass over them, a dup2() onto one is refused (EBUSY).
	cat >o.py <<'PY'
import errno, os, sys
from echoes import listener, serve_one, echo_clients
role, b, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
msg = b"own descriptors " * 5000
def close_all_but(l):
    os.closerange(l.fileno() + 1, 1 << 20)   # close_range(), or closefrom()
    for fd in range(l.fileno() + 1, 4096):   # the daemon's loop
        try:
            os.close(fd)
        except OSError:
            pass
if role == "srv":
    l = listener(b, port)
    close_all_but(l)                         # as varnishd: right after listen
    serve_one(l, msg)
    ours = []
    for f in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + f).startswith("/dev/infiniband/"):
                ours.append(int(f))
        except OSError:   # listdir's own descriptor, closed since
            pass
    said = set()
    for fd in ours:
        try:
            os.close(fd)
            said.add("closed")
        except OSError as e:
            said.add(errno.errorcode[e.errno])
    try:
        os.dup2(0, ours[0])
        said.add("dup2 done")
    except OSError as e:
        said.add("dup2 " + errno.errorcode[e.errno])
    print("library descriptors: %d, %s" % (len(ours), " ".join(sorted(said))), flush=True)
    close_all_but(l)
    with open("after", "w") as f:            # a file on a freed number
        f.write("untouched")
    serve_one(l, msg)
    serve_one(l, msg)
else:
    echo_clients(b, port, msg, 3)
PY
	echo_pair o.py
	cat srv.out
	grep -qE '^library descriptors: [1-9][0-9]*, EBADF dup2 EBUSY$' srv.out
	[ "$(cat after)" = untouched ]
	stats_only_rdma cli.log
	stats_only_rdma srv.log
	[[ "$(stats_line cli.log)" == *"streams tcp=0 rdma=3 "* ]]
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
	# any of the four listeners. Before the table was shared, a listener
	# without the beacon read the client's hello as the request.
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

@test "a master that hands each accepted stream to a worker (SCM_RIGHTS with sendmsg and sendmmsg, as Node's cluster module) keeps every byte: the stream goes to TCP first" {
	# test/rdma/passfd.py: the master accepts and sends each stream to a
	# worker forked before, alternately with sendmsg and sendmmsg; the
	# worker has none of the library's state for it. Before, the worker
	# read the client's hello as the request.
	require_cmd python3
	local port
	port=$(free_port)
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/srv.log" \
		LD_PRELOAD="$(rsock_preload_value)" PYTHONPATH="$BATS_TEST_DIRNAME" \
		python3 "$BATS_TEST_DIRNAME/passfd.py" srv "$ADDR_B" "$port" 4
	wait_for_port "$port" 15 "$BG_PID"
	run bounded 60 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" python3 "$BATS_TEST_DIRNAME/passfd.py" cli "$ADDR_B" "$port" 4
	echo "$output"
	[ "$status" = 0 ] || { bg_output "$BG_PID"; false; }
	[[ "$output" == *"4 answers, EOF"* ]]
	wait_bg "$BG_PID" 30
	grep -q 'worker: 4 echoed' "$BATS_TEST_TMPDIR/srv.out"
	[ "$(grep -c 'sent to another process: its stream goes to TCP' srv.log)" -ge 4 ] || {
		grep -v poll srv.log | tail -30 >&2
		false
	}
	# every stream declined RDMA at the hand-off, and nothing was lost
	stats_line cli.log
	stats_line cli.log | grep -q 'streams tcp=4 rdma=0'
}

@test "a client that writes a 1 MB request before it reads, to an echo server (both blocking): echoed intact over RDMA, as kernel TCP's buffers allow" {
	# test/rdma/echoall.py: 1 MB is four times a ring (the library before
	# the spill stopped after 295 KB; kernel TCP in this guest once stopped
	# short of 3 MB, its buffers being autotuned). Both ends block in
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

@test "idle blocked readers sleep: 50 threads in recv() on silent RDMA streams do not wake, as on TCP, and each wakes for its EOF" {
	require_cmd python3
	# test/rdma/idle.py: the server's threads' voluntary context switches
	# over 3 s while each blocks in recv() on a silent client. Before
	# session 20 a blocked call's sleep woke every second (151 here).
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
	# every message spinning (the library before b385d56: 4-10 completion
	# events, and a CPU held for the whole transfer); a reader that only
	# reads large messages spins RSOCK_POLL_US and sleeps (about 460).
	# The sender copies (RSOCK_ZCOPY_KB=0), so its messages are 32 KiB:
	# spans sent without the copy go in 128 KiB messages since 88f541e,
	# about 140 for 16 MiB, too close to the bound for a sleep on each.
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

@test "message sizes: large blocking sends go in 128 KiB messages without the copy, copied ones in 32 KiB messages, small ones inline" {
	require_cmd python3
	# The sender's trace lines name every data message it posts (design.md
	# section 9): 1 MiB sendall()s (test/rdma/sink.py) are sent from the
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

@test "a server that accepts late gets exactly what its clients wrote and closed meanwhile, no hand-shake bytes; clients that write and close at once lose nothing" {
	require_cmd python3
	# test/rdma/lateaccept.py: 4 clients connect, write and close while
	# the server sleeps past their hello's time-out (RSOCK_HANDSHAKE_MS
	# 300 ms, the server's sleep 1.5 s); each stream then brings exactly
	# its message. Before session 20 the peer's FIN made the server take
	# the hello for one answered by another process, and the client's
	# hello and cancel reached the application as data.
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
	# and close at once. About one in a thousand such streams saw the
	# client's DREQ overtake its RTU at the server, which then waited
	# out the hand-shake and left the stream on TCP, the bytes written
	# over RDMA lost (streamcheck scenario 14 failed so in CI).
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
	# accepts late gives late. Before session 27 the write stopped the
	# event loop for up to RSOCK_HANDSHAKE_MS (2 s); now a non-blocking
	# socket waits at most RSOCK_NONBLOCK_MS (1 s by default, 100 ms
	# here), then TCP.
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

@test "a client that forks its writer right after connect() (the handshake's answer still awaited): parent and child share the stream, the echo comes back intact" {
	require_cmd python3
	# test/rdma/forkwriter.py: connect, fork at 0 to 200 ms; the child
	# writes 300 kB and shuts its side, the parent reads the echo.
	# Before session 27 a fork while the library's thread was due to
	# await the answer left the stream unsettled in both processes: the
	# second user waited out RSOCK_HANDSHAKE_MS, then wrote its cancel
	# and its bytes on TCP to a server reading RDMA (found with a Perl
	# client: 8 bytes too many, or a hang).
	local port
	port=$(free_port)
	start_bg fw env LD_PRELOAD="$(rsock_preload_value)" RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/fw-srv.log" \
		python3 "$BATS_TEST_DIRNAME/forkwriter.py" srv "$ADDR_B" "$port" 8
	wait_for_port "$port" 15 "$BG_PID"
	bounded 120 env LD_PRELOAD="$(rsock_preload_value)" RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/fw-cli.log" \
		python3 "$BATS_TEST_DIRNAME/forkwriter.py" cli "$ADDR_B" "$port" 8 > fw-cli.out
	wait_bg "$BG_PID" 30
	cat fw-cli.out
	grep -qx "intact 8 of 8" fw-cli.out
	! grep -q 'unexpected bytes' fw-srv.log || false
	stats_only_rdma fw-srv.log
}

@test "a client that forks and exits without closing (exit(), as a shell's \`( ... ) & exit\`): the child goes on with the stream, as over kernel TCP" {
	require_cmd python3
	# test/rdma/forkexit.py: an exchange over RDMA, fork, the parent
	# exits with the stream open; the child exchanges a second later.
	# Before session 30 the owner took the verbs objects with it and the
	# child got EIO; the exit now hands the stream to TCP, as close() does.
	local port path pre
	for path in tcp rdma; do
		pre=()
		[ "$path" = rdma ] && pre=(LD_PRELOAD="$(rsock_preload_value)")
		port=$(free_port)
		start_bg "srv-$path" env "${pre[@]}" RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv-$path.log" \
			PYTHONPATH="$BATS_TEST_DIRNAME" python3 -c '
import echoes, sys
l = echoes.listener(sys.argv[1], int(sys.argv[2]))
c, _ = l.accept()
echoes.echo_to_eof(c)' "$ADDR_B" "$port"
		wait_for_port "$port" 15 "$BG_PID"
		bounded 30 env "${pre[@]}" RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/cli-$path.log" \
			python3 "$BATS_TEST_DIRNAME/forkexit.py" "$ADDR_B" "$port" "$ADDR_A" >"cli-$path.out"
		wait_bg "$BG_PID" 30 || { bg_output "$BG_PID"; false; }
		cat "cli-$path.out"
		grep -qx "parent got b'hello'" "cli-$path.out"
		grep -qx "child got b'child!'" "cli-$path.out"
	done
	grep -q 'carried by RDMA' cli-rdma.log
	grep -q 'at exit, moved to TCP for a child' cli-rdma.log
}

@test "epoll wakes for the TCP bytes that follow a hand-over: a stream registered (level and edge) while on RDMA, then handed to TCP by a splice into it (as haproxy's splice-auto does)" {
	require_cmd python3
	# test/rdma/hoepoll.py: the server registers the stream, splices one
	# byte into it (a non-blocking stream: handed to TCP) and waits in
	# epoll_wait for the client's next bytes, written 0.3 s later. Before
	# session 29 the registration slept through them (5 s, nothing), and
	# haproxy stalled both ways on a one-CPU guest.
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

@test "Python's subprocess (vfork; the child closes every descriptor, or takes the stream as its stdin and stdout) leaves the server's RDMA stream intact" {
	require_cmd python3
	# subprocess forks with vfork: the child shares the server's memory,
	# the library's tables included, until it execs. What it closes
	# (close_range from 3) or duplicates (dup2 onto 0 and 1) is its own,
	# not the server's; a stream it takes moves to TCP first, as one an
	# exec'd image inherits does.
	subproc_pair python3 "$BATS_TEST_DIRNAME/subproc.py" srv
}

@test "a C server that starts its children with clone(CLONE_VM | CLONE_VFORK) (as libuv does) keeps its RDMA stream; a child given the stream answers on TCP" {
	require_cmd python3
	# The same exchange as subproc.py's, from test/progs/spawnvm: its
	# children share its memory without going through vfork (no stub of
	# ours runs): the library tells them apart by the home pid (init.h).
	subproc_pair "$PROGS/spawnvm"
	grep -q '^spawnvm: 5 echoes' srv.out
}

# ---- mixed peers and fallback ---------------------------------------------------

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
	cc -O2 -I"$RSOCK_SRC_DIR/include" -o sb "$RSOCK_SRC_DIR/bench/sockbench.c" -ldl -lpthread
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

@test "no RDMA path (loopback, a netdev without RDMA): kernel TCP at once" {
	local port addr
	for addr in 127.0.0.1 "$ADDR_PLAIN_PEER"; do
		port=$(free_port)
		rand_file data 100000
		start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
			sh -c "exec nc -l -s $addr -p $port >got"
		wait_for_port "$port" 15 "$BG_PID"
		bounded 30 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
			nc -N "$addr" "$port" <data
		wait_bg "$BG_PID" 30
		same_file data got "over $addr"
		stats_tcp cli.log no_device
		rm -f cli.log srv.log got
	done
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
		# refused as fast as TCP: well under the probe bound
		awk -v t="${BASH_REMATCH[1]}" 'BEGIN { exit !(t < 0.5) }'
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

# ---- endings --------------------------------------------------------------------

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

@test "a hostile peer cannot write into another stream's ring (one protection domain per stream); a protocol violation resets the stream, its peer told at once" {
	# test/progs/keycheck.c speaks the negotiation itself, opens two streams
	# to a librsock echo server and aims an RDMA WRITE through stream 1's QP
	# at stream 2's ring with stream 2's key: the server's device must refuse
	# it, stream 1 must end like a reset TCP stream, stream 2 must go on.
	# On a third stream it sends 4 bytes, then data beyond the ring: the
	# server's application reads the 4 bytes, then ECONNRESET (the library
	# before: EPROTO, which no TCP read returns), and the hostile peer's TCP
	# connection is reset at once (before: a clean end of stream once the
	# application closed, the break invisible to the peer).
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
	# Closed streams were torn down off the closing thread: by the cm
	# thread, or by the next stream, which took their rings.
	local l
	for l in cli.log srv.log; do
		[ "$(grep -c 'closed stream torn down at close' "$l")" -eq 0 ]
		[ "$(grep -cE 'closed stream torn down (by the cm thread|for a new stream)' "$l")" -ge 11 ]
	done
	# RSOCK_RING_CACHE=0: every stream registers its own
	rm -f got*
	fetch_all cli0.log 3 RSOCK_RING_CACHE=0
	for i in 0 1 2; do same_file "www/f$i" "got$i" "fetch $i without the cache"; done
	[ "$(grep -c 'bytes registered' cli0.log)" -ge 3 ]
	! grep -q 'bytes reused' cli0.log || false
}
