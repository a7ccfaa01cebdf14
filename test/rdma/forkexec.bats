#!/usr/bin/env bats
# Processes and descriptors (doc/design.md, "Descriptors, fork, exec"):
# an RDMA stream shared by fork(), inherited over exec(), passed with
# SCM_RIGHTS, duplicated onto stdio, held by a vfork or CLONE_VM child, or
# kept across a change of credentials goes on as over kernel TCP: it stays on
# RDMA where one process uses it, and moves to TCP first (the hand-over)
# where another process takes it; no byte is lost or added.

load ../bats/helpers
load rsock

# ---- fork -------------------------------------------------------------------

@test "listen then fork at once (as nginx starts its workers): every child starts threads of its own and listens" {
	# A child forked while the library's new thread is still in its start-up
	# code must not inherit a lock held (under ASan, the allocator's): its own
	# threads would hang, as an nginx worker's do when it does.
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

@test "a client that forks its writer right after connect() (the handshake's answer still awaited): parent and child share the stream, the echo comes back intact" {
	require_cmd python3
	# test/rdma/forkwriter.py: connect, fork at 0 to 200 ms; the child
	# writes 300 kB and shuts its side, the parent reads the echo. A fork
	# while the library's thread is due to await the answer must leave the
	# stream settled in both processes: otherwise the second user waits out
	# RSOCK_HANDSHAKE_MS, then writes its cancel and its bytes on TCP to a
	# server reading RDMA (8 bytes too many, or a hang).
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
	# The owner's exit takes the verbs objects with it, so it hands the
	# stream to TCP first, as close() does: the child must not get EIO.
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

@test "two processes share a stream accepted before either used it (vsftpd's per-login processes): the second does not wait for a hello the first answered" {
	require_cmd python3
	local port
	port=$(free_port)
	# vsftpd forks a login's privileged and unprivileged processes before
	# either touches the stream; the first answers the hello (and stays on
	# TCP: it has changed its credentials), and the second must not then
	# wait for a hello until the handshake bound (4 s a login). Here the
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
    print("login %.2f s" % (time.time() - t))
PY
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/srv.log" \
		LD_PRELOAD="$(rsock_preload_value)" PYTHONPATH="$BATS_TEST_DIRNAME" python3 v.py srv "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	run bounded 30 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" python3 v.py cli "$ADDR_B" "$port"
	echo "$output"
	[ "$status" = 0 ]
	wait_bg "$BG_PID" 30
	# well under the 4 s handshake bound a second process waiting for the
	# hello would add
	awk '/^login/ { exit !($2 < 2.0) }' <<<"$output"
	grep -q 'another process answered the hello already' srv.log || { cat srv.log >&2; false; }
}

# ---- exec, stdio and the hand-over to TCP -----------------------------------

@test "handcheck: a stream changes hands (exec'd image, forked child, owner closing first, system()) as over kernel TCP" {
	differential handcheck
	# the streams were moved to TCP in order, by the SWITCH exchange
	grep -qE 'stats: .* handovers=[1-9]' rdma.log || {
		grep 'stats:' rdma.log >&2
		false
	}
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
	# writes through stdout, inside libc: no interposer sees that write,
	# whose bytes go on the kernel socket. Behind an RDMA stream the
	# server's library drops them as stray control bytes ("unexpected bytes
	# on the control connection"), and the shell waits for an answer for
	# ever: so a stream put on descriptor 1 or 2 moves to TCP first, as one
	# given to fdopen does.
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

# ---- descriptors passed to another process or closed ------------------------

@test "a master that hands each accepted stream to a worker (SCM_RIGHTS with sendmsg and sendmmsg, as Node's cluster module) keeps every byte: the stream goes to TCP first" {
	# test/rdma/passfd.py: the master accepts and sends each stream to a
	# worker forked before, alternately with sendmsg and sendmmsg; the
	# worker has none of the library's state for it, so the stream goes to
	# TCP at the hand-off: the worker must not read the client's hello as
	# the request.
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

@test "a server that closes every descriptor it did not open (close_range, a close() loop) keeps serving over RDMA: the library's own are not the application's" {
	require_cmd python3
	# varnishd's manager calls closefrom(3) after it listened: that closed
	# the library's event channels, and the numbers, reused for its pid
	# file, then received the library thread's commands (a spin, a corrupt
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

# ---- children that share the parent's memory (vfork, CLONE_VM) --------------

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

# ---- credentials ------------------------------------------------------------

# cpu_ticks PID: user + system clock ticks the process has used.
cpu_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

@test "credentials: a server that calls setuid after accepting (as rsync's daemon child does) keeps the stream: it moves to TCP, nothing lost" {
	# The kernel takes write()-based verbs commands (soft-RoCE's post_send,
	# every rdma_cm command) only from the credentials the device file was
	# opened with: the stream moves to TCP, or the application's send would
	# fail with EACCES.
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
		# (a probe that timed out would take 10 s: RSOCK_PROBE_MS)
		bounded 60 env $(rsock_env "cli$i") RSOCK_PROBE_MS=10000 socat -t 10 - \
			"TCP4:$ADDR_B:$port,bind=$ADDR_A" <data >"got$i"
		t1=$(date +%s%N)
		echo "# stream $i: $(((t1 - t0) / 1000000)) ms" >&3
		same_file data "got$i" "stream $i"
		stats_tcp "cli$i.log" peer
		# no probe time-out: the closed beacons refuse the probe at once
		# (a loaded one-CPU guest takes up to about 2 s for the stream)
		[ $(((t1 - t0) / 1000000)) -lt 6000 ]
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
