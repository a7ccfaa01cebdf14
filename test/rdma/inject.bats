#!/usr/bin/env bats
# Failures nothing outside the process can cause, made by the library's own
# fault injection (RSOCK_FAULT; doc/design.md, "Errors"): what the
# application sees, and that no byte is lost or reordered.
#   set-up (a QP, a registration, late or reordered rdma_cm events): the
#     stream stays on TCP, every byte intact, the fallback counted by reason;
#     under RSOCK_MODE=rdma, the documented error;
#   data path (a post, a completion, the CQ, its overrun) on an established stream: the
#     stream fails over to its control connection, every byte arrives once
#     and the end is a clean EOF (failover_outcome); a completion that says
#     the peer's device refused our write is the peer's protocol's business,
#     not a broken path: the bytes before, then a reset at both ends
#     (reset_outcome);
#   a hand-over whose SWITCH the peer leaves unanswered: EOF and EPIPE after
#     TP_SWITCH_MS, never bytes out of order.

load ../bats/helpers
load rsock

FP=

setup() {
	cd "$BATS_TEST_TMPDIR"
	FP="python3 $BATS_TEST_DIRNAME/faultpair.py"
}

# pair "SERVER VARS" "CLIENT VARS" BYTES [echo] [oob]: test/rdma/faultpair.py's
# server at B (its bytes in `got`) and client at A sending the file `data`
# of BYTES random bytes (what came back in `back`), both under librsock with
# RSOCK_STATS=1 and their own variables (RSOCK_FAULT...); logs srv.log and
# cli.log, outputs srv.out and cli.out. The client's status is $status; a
# server whose client was refused in connect() is stopped, else awaited.
pair() {
	local sv=$1 cv=$2 n=$3 echo=${4:-} oob=${5:-} port
	rand_file data "$n"
	rm -f srv.log cli.log got back
	port=$(free_port)
	# shellcheck disable=SC2086 # the variables split into words
	start_bg srv env $sv RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" $FP srv "$ADDR_B" "$port" got $echo
	SRV=$BG_PID
	wait_for_port "$port" 15 "$SRV"
	rdma_snapshot
	# shellcheck disable=SC2086
	run bounded 40 env $cv RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" $FP cli "$ADDR_B" "$port" data back "$ADDR_A" $oob
	printf '%s\n' "$output" >cli.out
	if grep -q '^cli connect ' cli.out; then
		stop_bg "$SRV" # (a connect() refused before its SYN: no stream comes)
	else
		wait_bg "$SRV" 30 || true
	fi
	echo "client:" && cat cli.out && echo "server:" && cat "$BATS_TEST_TMPDIR/srv.out" "$BATS_TEST_TMPDIR/srv.err"
}

# fired LOG SITE: the fault was injected at SITE in the process of LOG.
fired() {
	grep -q "RSOCK_FAULT: $2 fails" "$1" || {
		echo "no fault injected at $2 in $1:" >&2
		cat "$1" >&2
		return 1
	}
}

# echoed_on_tcp CLI_REASON SRV_REASON: the echo came back whole, both ends
# on kernel TCP with the fallback counted for these reasons.
echoed_on_tcp() {
	local n
	n=$(stat -c %s data)
	grep -qx "cli sent $n then ok at .*" cli.out
	grep -qx "cli got $n then EOF at .*" cli.out
	grep -qx "srv got $n then EOF at .*" "$BATS_TEST_TMPDIR/srv.out"
	same_file data got "client to server"
	same_file data back "server to client"
	stats_tcp cli.log "$1"
	stats_tcp srv.log "$2"
}

# ---- set-up failures: TCP, nothing lost, the reason counted ------------------

@test "inject: the client's QP cannot be made after its hello went out: both on TCP, echo intact, 'resources' counted" {
	pair "" "RSOCK_FAULT=create_qp" 3000000 echo
	[ "$status" -eq 0 ]
	fired cli.log create_qp
	echoed_on_tcp resources peer
}

@test "inject: the server's QP cannot be made (ahead, nor for the request): both on TCP, echo intact, 'resources' at the server" {
	pair "RSOCK_FAULT=create_qp:1+" "" 3000000 echo
	[ "$status" -eq 0 ]
	fired srv.log create_qp
	echoed_on_tcp peer resources
}

@test "inject: the server's QP made ahead fails once: made again for the request, the stream on RDMA, echo intact" {
	# (the QP made a second time, on a loaded host past the 2 s default
	# hand-shake: both ends wait up to 10 s; the client reads the answer
	# 1 s late, so that the server's QP made ahead right after the answer
	# is its first: in a one-CPU guest the client's request could
	# otherwise come first, fail at the request's QP and stay on TCP)
	pair "RSOCK_FAULT=create_qp:1 RSOCK_HANDSHAKE_MS=10000" "RSOCK_FAULT=answer_slow=1000 RSOCK_HANDSHAKE_MS=10000" 3000000 echo
	[ "$status" -eq 0 ]
	fired srv.log create_qp
	same_file data got "client to server"
	same_file data back "server to client"
	stats_only_rdma cli.log
	stats_only_rdma srv.log
	rdma_crossed 1000
}

@test "inject: the server's library thread cannot accept the data connection (as when the client gave up first): the request rejected, both on TCP, echo intact" {
	# (the stream no longer names the rejected id, which the thread
	# destroys: the server's accept() closes the stream without it)
	pair "RSOCK_FAULT=accept" "" 3000000 echo
	[ "$status" -eq 0 ]
	fired srv.log accept
	echoed_on_tcp peer peer
}

@test "inject: ibv_reg_mr fails for the client's rings (while it probes, and again after): both on TCP, echo intact, 'resources' counted" {
	pair "" "RSOCK_FAULT=reg_mr:1+" 3000000 echo
	[ "$status" -eq 0 ]
	fired cli.log reg_mr
	echoed_on_tcp resources protocol
}

@test "inject: ibv_reg_mr fails for the server's send ring: the hello answered with a NAK, both on TCP, echo intact, 'resources' at both" {
	pair "RSOCK_FAULT=reg_mr:2" "" 3000000 echo
	[ "$status" -eq 0 ]
	fired srv.log reg_mr
	echoed_on_tcp resources resources
}

@test "inject: the server's library thread takes the data connection's request late (past the client's bound): both on TCP, echo intact" {
	pair "RSOCK_FAULT=cm_late:1=2500 RSOCK_HANDSHAKE_MS=1000" "RSOCK_HANDSHAKE_MS=1000" 3000000 echo
	[ "$status" -eq 0 ]
	fired srv.log cm_late
	echoed_on_tcp peer peer
}

@test "inject: the server's library thread takes ESTABLISHED late (past the server's bound; the client on RDMA already): the server goes RDMA too, echo intact" {
	pair "RSOCK_FAULT=cm_late:2=2500 RSOCK_HANDSHAKE_MS=1000" "RSOCK_HANDSHAKE_MS=1000" 3000000 echo
	fired srv.log cm_late
	[ "$status" -eq 0 ]
	same_file data got "client to server"
	same_file data back "server to client"
	stats_only_rdma cli.log
	stats_only_rdma srv.log
}

@test "inject: the server's library thread takes ESTABLISHED after the client's DISCONNECTED (a client that writes and closes at once): on RDMA, nothing lost" {
	pair "RSOCK_FAULT=cm_swap:2" "" 100000
	[ "$status" -eq 0 ]
	fired srv.log cm_swap
	same_file data got "client to server"
	stats_only_rdma cli.log
	stats_only_rdma srv.log
}

# A negotiation message that arrives after its reader gave up waiting (a
# slow or cut wire, a stopped process) is the library's: it is dropped where
# it heads the stream, never handed to the application (the echo is exact
# both ways; doc/design.md, "Choosing a path").

@test "inject: the server's answer comes after the client gave up (answer_late): the late answer is dropped, both on TCP, echo intact" {
	pair "RSOCK_FAULT=answer_late=3000 RSOCK_HANDSHAKE_MS=5000" "RSOCK_HANDSHAKE_MS=1000" 3000000 echo
	[ "$status" -eq 0 ]
	fired srv.log answer_late
	echoed_on_tcp peer peer
}

@test "inject: a late answer unread when a writer that never reads closes: dropped at the close, so the server gets every byte and EOF, no reset" {
	# The client writes, waits past the late answer's arrival without
	# reading, then closes: a socket closed with unread bytes resets the
	# connection, which over kernel TCP (no answer at all) it would not.
	local port
	rand_file data 1000000
	port=$(free_port)
	start_bg srv env RSOCK_FAULT=answer_late=2000 RSOCK_HANDSHAKE_MS=5000 RSOCK_STATS=1 \
		RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		PYTHONPATH="$BATS_TEST_DIRNAME" $FP srv "$ADDR_B" "$port" got
	SRV=$BG_PID
	wait_for_port "$port" 15 "$SRV"
	run bounded 40 env RSOCK_HANDSHAKE_MS=1000 RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" \
		LD_PRELOAD="$(rsock_preload_value)" python3 -c '
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), source_address=(sys.argv[4], 0))
t0 = time.monotonic()
s.sendall(open(sys.argv[3], "rb").read())
time.sleep(max(0.0, 4.0 - (time.monotonic() - t0)))
s.close()
print("cli closed")
' "$ADDR_B" "$port" data "$ADDR_A"
	wait_bg "$SRV" 30 || true
	echo "$output"
	cat "$BATS_TEST_TMPDIR/srv.out"
	[ "$status" -eq 0 ]
	fired srv.log answer_late
	grep -qx "srv got 1000000 then EOF at .*" "$BATS_TEST_TMPDIR/srv.out"
	same_file data got "client to server"
	stats_tcp cli.log peer
}

@test "inject: the client reads the answer after the server gave up (answer_slow): its late cancel is dropped, both on TCP, echo intact" {
	pair "RSOCK_HANDSHAKE_MS=1000" "RSOCK_FAULT=answer_slow=3000 RSOCK_HANDSHAKE_MS=1000" 3000000 echo
	[ "$status" -eq 0 ]
	fired cli.log answer_slow
	same_file data got "client to server"
	same_file data back "server to client"
	stats_tcp srv.log peer
}

@test "inject: the client's hello comes after the server gave up (hello_late): the late hello and its cancel are dropped, both on TCP, echo intact" {
	pair "RSOCK_HANDSHAKE_MS=1000" "RSOCK_FAULT=hello_late=3000 RSOCK_HANDSHAKE_MS=1000" 3000000 echo
	[ "$status" -eq 0 ]
	fired cli.log hello_late
	echoed_on_tcp peer protocol
}

# The server that refused a hello ('resources': its rings could not be
# registered) expects the client's cancel at the head of the stream (it
# comes when the refusal reached the client late). The client had the
# refusal in time and sends "RS" (the cancel's first two bytes), then waits
# for their echo: 50 ms on they are the application's.
@test "inject: the stream's first bytes begin like a late cancel and stop there: they are the application's, echoed at once" {
	local port
	port=$(free_port)
	# shellcheck disable=SC2086 # FP splits into words
	start_bg srv env RSOCK_FAULT=reg_mr:1+ RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" \
		LD_PRELOAD="$(rsock_preload_value)" PYTHONPATH="$BATS_TEST_DIRNAME" $FP srv "$ADDR_B" "$port" got echo
	SRV=$BG_PID
	wait_for_port "$port" 15 "$SRV"
	run bounded 40 env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" LD_PRELOAD="$(rsock_preload_value)" \
		python3 -c '
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(b"RS")
s.settimeout(10)
t0, got = time.monotonic(), b""
try:
    while len(got) < 2:
        d = s.recv(2 - len(got))
        if not d:
            break
        got += d
except OSError as e:
    print("error", e)
print("echo %r after %.2f s" % (got, time.monotonic() - t0))
s.shutdown(socket.SHUT_WR)
s.recv(1)
' "$ADDR_B" "$port"
	echo "$output"
	wait_bg "$SRV" 30
	[ "$status" -eq 0 ]
	grep -q "^echo b'RS' after" <<<"$output"
	awk '$1 == "echo" { exit !($4 < 2) }' <<<"$output"
	fired srv.log reg_mr
	stats_tcp srv.log resources
}

@test "inject: RSOCK_MODE=rdma: the client's QP or ring registration fails, or the request is taken late: connect() fails with ECONNREFUSED" {
	local f
	for f in create_qp reg_mr:1+; do
		pair "" "RSOCK_MODE=rdma RSOCK_FAULT=$f" 1000
		[ "$status" -ne 0 ]
		grep -qx "cli connect ECONNREFUSED" cli.out
		fired cli.log "${f%:*}"
		stop_all_bg
	done
	pair "RSOCK_FAULT=cm_late:1=2500 RSOCK_HANDSHAKE_MS=1000" "RSOCK_MODE=rdma RSOCK_HANDSHAKE_MS=1000" 1000
	[ "$status" -ne 0 ]
	grep -qx "cli connect ECONNREFUSED" cli.out
	fired srv.log cm_late
}

# ---- data-path failures on an established stream ------------------------------

# failover_outcome SIDE: what the application sees when the RDMA path of an
# established stream breaks at SIDE (cli or srv) and its control connection
# works (doc/design.md, "Errors" and "The hand-over to TCP"): nothing. The
# server reads every byte, in order, then EOF; the client's writes all
# succeed; SIDE counts the failover.
failover_outcome() {
	local so co n
	so=$(cat "$BATS_TEST_TMPDIR/srv.out")
	co=$(cat cli.out)
	n=$(stat -c %s data)
	echo "# server: $so; client: ${co//$'\n'/, }" >&3
	[[ "$so" == "srv got $n then EOF at "* ]] || {
		echo "the server did not get the $n bytes and EOF: $so" >&2
		return 1
	}
	cmp data got
	[[ "$co" == *"cli sent $n then ok at "* ]] || {
		echo "the client's writes did not all succeed: $co" >&2
		return 1
	}
	grep -q 'stats: .* failovers=1' "$1.log" || {
		echo "$1 counted no failover:" >&2
		grep 'stats:' "$1.log" >&2
		return 1
	}
}

# reset_outcome: what the application sees when the stream is broken for a
# reason no failover mends (doc/design.md, "Errors"): the bytes that came
# before, in order, then ECONNRESET (or ETIMEDOUT where the transport's
# retries ran out) at both ends, within 2 s of each other; no hang.
reset_outcome() {
	local so co n got ts tc
	so=$(cat "$BATS_TEST_TMPDIR/srv.out")
	co=$(cat cli.out)
	n=$(stat -c %s data)
	[[ "$so" =~ srv\ got\ ([0-9]+)\ then\ (ECONNRESET|ETIMEDOUT)\ at\ ([0-9.]+) ]] || {
		echo "the server did not see the stream reset: $so" >&2
		return 1
	}
	got=${BASH_REMATCH[1]} ts=${BASH_REMATCH[3]}
	[ "$got" -lt "$n" ] || { echo "the server got everything: no failure seen" >&2; return 1; }
	cmp -n "$got" data got || { echo "the server's bytes are not the first $got sent" >&2; return 1; }
	[[ "$co" =~ cli\ (sent|got)\ [0-9]+\ then\ (ECONNRESET|ETIMEDOUT|EPIPE)\ at\ ([0-9.]+) ]] || {
		echo "the client saw no error: $co" >&2
		return 1
	}
	tc=${BASH_REMATCH[3]}
	echo "# server: $so; client: ${co//$'\n'/, }" >&3
	awk -v a="$ts" -v b="$tc" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 2.0) }' || {
		echo "the ends saw the failure $ts and $tc: more than 2 s apart" >&2
		return 1
	}
}

@test "inject: ibv_post_send fails on an established stream (the sender's 20th post): the stream fails over to TCP, nothing lost" {
	pair "" "RSOCK_FAULT=post_send:20" 20000000
	fired cli.log post_send
	stats_rdma cli.log 1 tx
	failover_outcome cli
}

@test "inject: epoll registrations of a stream failed over under them (post_send fails): DEL, ADD and MOD answer as over kernel TCP" {
	local port
	port=$(free_port)
	start_bg srv python3 "$BATS_TEST_DIRNAME/epswitch.py" srv "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	run bounded 40 python3 "$BATS_TEST_DIRNAME/epswitch.py" cli "$ADDR_B" "$port"
	[ "$status" = 0 ] || { echo "$output"; false; }
	printf '%s\n' "$output" >tcp.out
	wait_bg "$BG_PID" 10
	port=$(free_port)
	start_bg srv env RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/srv.log" LD_PRELOAD="$(rsock_preload_value)" \
		python3 "$BATS_TEST_DIRNAME/epswitch.py" srv "$ADDR_B" "$port"
	wait_for_port "$port" 15 "$BG_PID"
	run bounded 40 env RSOCK_FAULT=post_send:40 RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/cli.log" \
		LD_PRELOAD="$(rsock_preload_value)" python3 "$BATS_TEST_DIRNAME/epswitch.py" cli "$ADDR_B" "$port"
	printf '%s\n' "$output" >rsock.out
	wait_bg "$BG_PID" 10 || true
	fired cli.log post_send
	[ "$(stat_of cli.log failovers)" = 1 ] || { cat cli.log >&2; false; }
	diff tcp.out rsock.out
}

@test "inject: ibv_post_send fails at a receiver, whose posts are only its read marks and credits: the stream fails over to TCP, nothing lost" {
	pair "RSOCK_FAULT=post_send:3" "" 20000000
	fired srv.log post_send
	stats_rdma srv.log 1 rx
	failover_outcome srv
}

@test "inject: ibv_post_recv fails on an established stream (the receiver's first repost): the stream fails over to TCP, nothing lost" {
	pair "RSOCK_FAULT=post_recv:10" "" 20000000
	fired srv.log post_recv
	stats_rdma srv.log 1 rx
	failover_outcome srv
}

@test "inject: a completion with IBV_WC_REM_ACCESS_ERR at the receiver: a reset, no failover" {
	pair "RSOCK_FAULT=wc:40=rem_access" "" 20000000
	fired srv.log wc
	reset_outcome
}

@test "inject: a completion with IBV_WC_REM_INV_REQ_ERR at the receiver (the transport malformed a write on the way, as soft-RoCE does under load): the stream fails over to TCP, nothing lost" {
	pair "RSOCK_FAULT=wc:40=rem_inv_req" "" 20000000
	fired srv.log wc
	failover_outcome srv
}

@test "inject: a completion with IBV_WC_RETRY_EXC_ERR at the sender (its retries ran out): the stream fails over to TCP, nothing lost" {
	pair "" "RSOCK_FAULT=wc:10=retry_exc" 20000000
	fired cli.log wc
	failover_outcome cli
}

@test "inject: ibv_poll_cq fails at the receiver: the stream fails over to TCP, nothing lost" {
	pair "RSOCK_FAULT=poll_cq:300" "" 20000000
	fired srv.log poll_cq
	failover_outcome srv
}

@test "inject: ibv_req_notify_cq fails at the receiver: the stream fails over to TCP, nothing lost" {
	pair "RSOCK_FAULT=req_notify:3" "" 20000000
	fired srv.log req_notify
	failover_outcome srv
}

# ---- rdma_cm events of an established stream ------------------------------------

# made_up LOG KIND: the library's thread of LOG's process took a made-up
# rdma_cm event KIND (ADDR_CHANGE, DEVICE_REMOVAL) and broke the path for it.
made_up() {
	grep -q "RSOCK_FAULT: a made-up $2 for a stream" "$1" &&
		grep -q 'rdma_cm: .*: the RDMA path is broken' "$1" || {
		echo "no made-up $2 taken for the stream in $1:" >&2
		grep -E 'RSOCK_FAULT|rdma_cm|broken|failover' "$1" >&2
		return 1
	}
}

@test "inject: a made-up rdma_cm ADDR_CHANGE for the server's stream mid-transfer: its library thread fails it over, nothing lost" {
	pair "RSOCK_FAULT=cm_addr_change=150 RSOCK_LOG_LEVEL=debug" "" 40000000
	made_up srv.log ADDR_CHANGE
	stats_rdma srv.log 1 rx
	failover_outcome srv
}

@test "inject: a made-up DEVICE_REMOVAL for the client's stream mid-echo: it fails over and gives back its verbs objects and id (the device stays), nothing lost either way" {
	pair "" "RSOCK_FAULT=cm_removal=150 RSOCK_LOG_LEVEL=debug" 40000000 echo
	made_up cli.log DEVICE_REMOVAL
	grep -q 'verbs objects given back' cli.log
	stats_rdma cli.log 1 tx
	failover_outcome cli
	same_file data back "server to client"
}

# ---- asynchronous events of the device ----------------------------------------

@test "inject: a made-up IBV_EVENT_CQ_ERR (its CQ overran) for the client's stream mid-echo: its library thread fails it over, nothing lost either way" {
	pair "" "RSOCK_FAULT=cq_err=150 RSOCK_LOG_LEVEL=debug" 40000000 echo
	grep -q 'RSOCK_FAULT: a made-up IBV_EVENT_CQ_ERR for a stream' cli.log
	grep -q 'its completion queue overran (IBV_EVENT_CQ_ERR): the RDMA path is broken' cli.log
	stats_rdma cli.log 1 tx
	failover_outcome cli
	same_file data back "server to client"
}

# A real overrun: soft-RoCE drops the completion that does not fit, raises
# IBV_EVENT_CQ_ERR and moves the QP to its error state (a flushed completion
# may say so first); completions lost are bytes the failover sends again.
@test "inject: the server's CQ made with 1 entry (RSOCK_FAULT=cq_small=1) overruns mid-echo: the device's IBV_EVENT_CQ_ERR is read, the stream fails over, nothing lost either way" {
	pair "RSOCK_FAULT=cq_small=1 RSOCK_LOG_LEVEL=debug" "" 40000000 echo
	fired srv.log cq_small
	grep -q 'asynchronous event CQ error' srv.log
	grep -q 'the RDMA path is broken, the stream moves to TCP' srv.log
	failover_outcome srv
	same_file data back "server to client"
}

# ---- the hand-over to TCP -----------------------------------------------------

@test "inject: the peer leaves a hand-over's SWITCH unanswered: after TP_SWITCH_MS (10 s) the stream is shut down, EPIPE and EOF at the asking end, EOF at the peer, no byte out of order" {
	local sent t0 t1
	# The client sends half the file, then a byte with MSG_OOB, which the
	# kernel must send: the stream moves to TCP first ("The hand-over to
	# TCP"), and the server's library drops the client's SWITCH.
	pair "RSOCK_FAULT=switch_drop" "" 2000000 "" oob
	fired srv.log switch_drop
	grep -q 'could not be moved to TCP (Connection timed out): it is shut down' cli.log
	t0=$(sed -n 's/^cli oob at \([0-9.]*\)$/\1/p' cli.out)
	t1=$(sed -n 's/^cli sent [0-9]* then EPIPE at \([0-9.]*\)$/\1/p' cli.out)
	sent=$(sed -n 's/^cli sent \([0-9]*\) then EPIPE at .*$/\1/p' cli.out)
	[ "$sent" -ge 1000000 ] && [ "$sent" -lt 2000000 ]
	grep -qx "cli got 0 then EOF at .*" cli.out
	# what came before the MSG_OOB, in order; neither the urgent byte nor
	# anything after it
	grep -qx "srv got $sent then EOF at .*" "$BATS_TEST_TMPDIR/srv.out"
	cmp -n "$sent" data got
	# after TP_SWITCH_MS, with a margin for a loaded guest
	awk -v a="$t0" -v b="$t1" 'BEGIN { d = b - a; printf "# shut down %.1f s after the MSG_OOB\n", d > "/dev/stderr"; exit !(d >= 9.5 && d < 14) }' 2>&3
}
