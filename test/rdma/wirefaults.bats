#!/usr/bin/env bats
# test bed: vm-pair
# Faults of an established stream's RDMA path on two hosts joined by a wire
# (test/vm/vm-pair; doc/design.md, "Errors" and "Descriptors, fork, exec": the
# failover): the host cuts the wire (QMP set_link) while both ends write
# checksummed, paced bytes to each other (test/rdma/wirestream.py, the
# server in guest b, the client in guest a). Kernel TCP sees the same outage
# and is the yardstick: each scenario runs over kernel TCP, then over
# librsock, whose stream crossed both rxe devices before the cut, fails over
# to its control connection where its path broke, and ends as TCP's does:
# every byte intact, none twice, a stall of about TCP's.
#
# The same for b's address leaving its netdev for 3 s, and for b's rxe device
# removed (rdma_cm's DEVICE_REMOVAL). RSOCK_SLOW_TESTS=1 adds the 30 s cut
# (about two minutes).

load ../bats/helpers
load helpers
load rsock
load wire

FAULT_BYTES=6000000 # each way, in 64 KiB writes
FAULT_PACE=100      # ms after each write: about 9 s without a cut, which
                    # outlasts the 4-5 s a loaded host takes from the
                    # connect to the cut

# fault_stream tcp|rsock: the paced stream both ways, in the background (the
# server's directory in D), a second after it connected (over librsock,
# after it went RDMA, the counters' snapshot taken before). EVENTS=1: both
# ends event-driven (non-blocking, epoll: wirestream.py's WIRESTREAM_EVENTS).
fault_stream() {
	local i ev=WIRESTREAM_EVENTS=${EVENTS:-0} se ce
	se=(env -u LD_PRELOAD "$ev") ce=(env -u LD_PRELOAD "$ev")
	D=$(peer_dir srv)
	if [ "$1" = rsock ]; then
		se=("$(rsock_in srv "$D")" RSOCK_LOG_LEVEL=debug "$ev")
		ce=("$(rsock_in cli "$PWD")" RSOCK_LOG_LEVEL=debug "$ev")
		wire_snapshot s
	fi
	stream_pair "$ADDR_B" "$ADDR_A" $FAULT_BYTES $FAULT_PACE "${se[*]}" "${ce[*]}"
	for ((i = 0; i < 300; i++)); do
		grep -q connected cli.out 2>/dev/null && break
		sleep 0.1
	done
	grep -q connected cli.out || { cat cli.err >&2; false; }
	if [ "$1" = rsock ]; then
		for ((i = 0; i < 50; i++)); do
			grep -q 'carried by RDMA' cli.log 2>/dev/null && break
			sleep 0.1
		done
		grep -q 'carried by RDMA' cli.log || { cat cli.log >&2; false; }
	fi
	sleep 1
}

# rdma_carried: the stream's bytes crossed both rxe devices, 256 KiB each
# way, since fault_stream (run while the wire is cut: the counts are those
# from before the cut; the guests' channel is not the wire).
rdma_carried() {
	wire_crossed s 262144 262144
}

# carrier_watch: a job in b that prints b's CLOCK_MONOTONIC seconds once its
# eth0 loses the carrier (the failover's detection time in b).
carrier_watch() {
	# shellcheck disable=SC2016 # b's shell expands them
	peer_start carrier timeout 120 bash -c 'exec {f}<> <(:)
		while read -r c </sys/class/net/eth0/carrier && [ "$c" = 1 ]; do read -r -t 0.02 -u $f || :; done
		read -r t _ </proc/uptime; echo "$t"'
}

# cut_now SECONDS|off: the host cuts the wire (for SECONDS, or until
# link_on); returns once a's eth0 lost its carrier, with CUT_AT, a's
# CLOCK_MONOTONIC seconds then; CUT_PID the background link_cut.
cut_now() {
	local c i
	if [ "$1" = off ]; then
		link_off
		CUT_PID=
	else
		link_cut "$1" >cut.txt &
		CUT_PID=$!
	fi
	for ((i = 0; i < 100; i++)); do
		read -r c </sys/class/net/eth0/carrier
		[ "$c" = 0 ] && break
		sleep 0.02
	done
	[ "$c" = 0 ] || { echo "eth0 kept its carrier" >&2; false; }
	read -r CUT_AT _ </proc/uptime
}

# stream_end tcp|rsock: both ends got every byte; the stalls in STALL_A,
# STALL_B; over librsock the failovers each end counted in FO_A, FO_B.
stream_end() {
	local rc=0
	wait_bg "$CLI_PID" 150 || rc=$?
	if [ "$rc" != 0 ]; then
		echo "a's end exited with $rc:" >&2
		cat cli.out cli.err >&2
		[ ! -f cli.log ] || grep -hvE 'sent|received|credit|wrote|posted' cli.log "$D/srv.log" | tail -n 40 >&2
		false
	fi
	peer_wait srv 60
	streams_match cli.out "$D/out"
	STALL_A=$(stall_of cli.out) STALL_B=$(stall_of "$D/out")
	if [ "$1" = rsock ]; then
		stats_rdma cli.log 262144 rx
		stats_rdma "$D/srv.log" 262144 rx
		FO_A=$(stat_of cli.log failovers) FO_B=$(stat_of "$D/srv.log" failovers)
	fi
}

# detected LOG AT: seconds from AT (CLOCK_MONOTONIC s of that guest) to the
# log's first "the RDMA path is broken" line; "-" without one.
detected() {
	awk -v at="$2" '/the RDMA path is broken/ { printf "%.2f", $3 - at; found = 1; exit }
		END { if (!found) printf "-" }' "$1"
}

# cut_scenario SECONDS: kernel TCP then librsock through a cut of SECONDS;
# both intact. Leaves TCP's stalls in TCP_A, TCP_B, its cut's length in
# TCP_CUT, librsock's in STALL_A, STALL_B, CUT, the detection times in
# DET_A, DET_B.
cut_scenario() {
	fault_stream tcp
	cut_now "$1"
	wait "$CUT_PID"
	stream_end tcp
	TCP_A=$STALL_A TCP_B=$STALL_B TCP_CUT=$(cut_secs)
	tap_note "kernel TCP, $(cat cut.txt): stalls a $TCP_A s, b $TCP_B s (took $(awk '$1 == "took" { print $2 }' cli.out) s)"
	peer_cleanup
	fault_stream rsock
	carrier_watch
	cut_now "$1"
	rdma_carried
	wait "$CUT_PID"
	stream_end rsock
	peer_wait carrier 10
	CUT=$(cut_secs)
	DET_A=$(detected cli.log "$CUT_AT")
	DET_B=$(detected "$D/srv.log" "$(cat "$(peer_dir carrier)/out")")
	tap_note "librsock, $(cat cut.txt): stalls a $STALL_A s, b $STALL_B s (took $(awk '$1 == "took" { print $2 }' cli.out) s); failovers a $FO_A, b $FO_B; path broken after a $DET_A s, b $DET_B s"
}

# cut_secs: how long the last cut was off (the host's clock; a loaded host
# stretches it).
cut_secs() {
	awk '{ for (i = 1; i < NF; i++) if ($i == "for") { print $(i + 1); exit } }' cut.txt
}

# stalls_like_tcp SLACK: librsock's stalls beyond its cut at most TCP's
# beyond its own and SLACK seconds.
stalls_like_tcp() {
	awk -v a="$STALL_A" -v b="$STALL_B" -v ta="$TCP_A" -v tb="$TCP_B" -v s="$1" -v c="$CUT" -v tc="$TCP_CUT" \
		'BEGIN { exit !(a - c <= ta - tc + s && b - c <= tb - tc + s) }' || {
		echo "librsock's stalls (a $STALL_A s, b $STALL_B s; cut $CUT s) exceed kernel TCP's (a $TCP_A s, b $TCP_B s; cut $TCP_CUT s) by more than $1 s" >&2
		grep -hE 'broken|failover|reset|SWITCH' cli.log "$D/srv.log" >&2
		false
	}
}

# failed_over: both ends counted one failover.
failed_over() {
	if [ "$FO_A" != 1 ] || [ "$FO_B" != 1 ]; then
		echo "failovers: a $FO_A, b $FO_B (expected 1 and 1)" >&2
		grep -hE 'broken|failover|reset|SWITCH' cli.log "$D/srv.log" >&2
		false
	fi
}

@test "wirefaults: the wire cut 3 s, kernel TCP rides it out; librsock's stream fails over at both ends and ends intact, its stall about TCP's" {
	cut_scenario 3
	failed_over
	stalls_like_tcp 3
}

@test "wirefaults: the wire cut 1 s, intact over kernel TCP and over librsock (within the retries or by a failover)" {
	cut_scenario 1
	stalls_like_tcp 3
}

@test "wirefaults: the wire cut 16 s under event-driven ends (non-blocking, epoll), kernel TCP rides it out; librsock fails over at both ends and rides it out too" {
	EVENTS=1 cut_scenario 16
	failed_over
	stalls_like_tcp 6
}

@test "wirefaults: the wire cut 30 s, kernel TCP rides it out by its retransmits; librsock fails over and rides it out too (RSOCK_SLOW_TESTS=1)" {
	[ "${RSOCK_SLOW_TESTS:-0}" = 1 ] || skip "about two minutes: RSOCK_SLOW_TESTS=1 runs it"
	cut_scenario 30
	failed_over
	stalls_like_tcp 10
}

# blocked_through SECONDS: until SECONDS after the cut both ends run on, with
# no error and nothing more arrived (their calls still blocked). 15 s: beyond
# the failover's detection (3 s) and the 10 s it gives an answering peer.
blocked_through() {
	local now a0 b0 why=
	a0=$(grep -c . cli.out) b0=$(grep -c . "$D/out")
	while read -r now _ </proc/uptime && awk -v n="$now" -v e="$CUT_AT" -v s="$1" 'BEGIN { exit !(n < e + s) }'; do
		kill -0 "$CLI_PID" 2>/dev/null || why="a's end ended"
		[ ! -e "$D/rc" ] || why="b's end ended"
		[ -z "$why" ] || break
		sleep 0.5
	done
	[ "$(grep -c . cli.out)" = "$a0" ] && [ "$(grep -c . "$D/out")" = "$b0" ] || why="${why:-an end printed}"
	! grep -qE 'reset|failed' cli.log "$D/srv.log" 2>/dev/null || why="${why:-a log says reset or failed}"
	[ -z "$why" ] && return
	echo "$why during the outage, $(awk -v n="$now" -v e="$CUT_AT" 'BEGIN { printf "%.1f", n - e }') s after the cut:" >&2
	cat cli.out cli.err "$D/out" "$D/err" >&2
	[ ! -f cli.log ] || grep -hvE 'sent|received|credit|wrote|posted' cli.log "$D/srv.log" | tail -n 40 >&2
	false
}

@test "wirefaults: the wire down for good, blocked reads and writes stay blocked 15 s without an error over kernel TCP and librsock; restored, the streams end intact" {
	fault_stream tcp
	cut_now off
	blocked_through 15
	link_on
	stream_end tcp
	tap_note "kernel TCP: stalls a $STALL_A s, b $STALL_B s"
	peer_cleanup
	fault_stream rsock
	cut_now off
	rdma_carried
	blocked_through 15
	link_on
	stream_end rsock
	tap_note "librsock: stalls a $STALL_A s, b $STALL_B s; failovers a $FO_A, b $FO_B"
	failed_over
}

# addr_gap SECONDS: b's IPv4 address on the wire (ADDR_B) leaves its eth0
# for SECONDS, then comes back: job addr in b, which prints "off T CIDR" and
# "on T" (b's CLOCK_MONOTONIC seconds); returns once it is off, with OFF_A,
# a's CLOCK_MONOTONIC seconds then. The teardown puts the address back if
# the test left it off.
addr_gap() {
	: >"$BATS_TEST_TMPDIR/.addr_off"
	# shellcheck disable=SC2016 # b's shell expands them
	peer_start addr bash -c 'c=$(ip -4 -o addr show dev eth0 | awk -v a="$1" "{ split(\$4, p, \"/\"); if (p[1] == a) print \$4 }")
		[ -n "$c" ] || { echo "no $1 on eth0" >&2; exit 1; }
		echo "$c" >cidr
		ip addr del "$c" dev eth0 || exit 1
		read -r t _ </proc/uptime; echo "off $t $c"
		sleep "$2"
		ip addr add "$c" dev eth0 || exit 1
		read -r t _ </proc/uptime; echo "on $t"' _ "$ADDR_B" "$1"
	local i o
	o=$(peer_dir addr)/out
	for ((i = 0; i < 250; i++)); do
		grep -q '^off ' "$o" 2>/dev/null && break
		sleep 0.02
	done
	read -r OFF_A _ </proc/uptime
}

# broken_why LOG: what broke the path, from LOG's first "the RDMA path is
# broken" line; "none" without one (the peer's SWITCH came first).
broken_why() {
	local w
	w=$(grep -m1 -h 'the RDMA path is broken' "$1" | sed -E 's/.*fd [0-9]+: (.*): the RDMA path is broken.*/\1/')
	echo "${w:-none}"
}

# addr_back: the address gap is over (its job ended well).
addr_back() {
	peer_wait addr 30
	rm -f "$BATS_TEST_TMPDIR/.addr_off"
}

# b's address leaves eth0: the kernel drops its RoCE GID, soft-RoCE's sends
# from it find no route (a local error at once) and a's writes to it go
# unanswered (retries out in about 1.1 s); rdma_cm says nothing (it sends
# ADDR_CHANGE only for a bond's failover), which the note records. The
# TCP connections survive (no reset for a removed address) and resume by
# their retransmits once it is back.
@test "wirefaults: b's IPv4 address removed from its netdev for 3 s, then back: intact over kernel TCP and librsock, which fails over; both stalls noted" {
	local off
	fault_stream tcp
	addr_gap 3
	addr_back
	stream_end tcp
	TCP_A=$STALL_A TCP_B=$STALL_B
	tap_note "kernel TCP, b's address off 3 s: stalls a $TCP_A s, b $TCP_B s (took $(awk '$1 == "took" { print $2 }' cli.out) s)"
	peer_cleanup
	fault_stream rsock
	addr_gap 3
	rdma_carried
	addr_back
	stream_end rsock
	off=$(awk '$1 == "off" { print $2 }' "$(peer_dir addr)/out")
	tap_note "librsock, b's address off 3 s: stalls a $STALL_A s, b $STALL_B s (took $(awk '$1 == "took" { print $2 }' cli.out) s); failovers a $FO_A, b $FO_B; path broken after b $(detected "$D/srv.log" "$off") s ($(broken_why "$D/srv.log")), a $(detected cli.log "$OFF_A") s ($(broken_why cli.log))"
	tap_note "rdma_cm ADDR_CHANGE logged: a $(grep -c ADDR_CHANGE cli.log), b $(grep -c ADDR_CHANGE "$D/srv.log")"
	[ "$FO_A" -ge 1 ] && [ "$FO_B" -ge 1 ] || {
		echo "failovers: a $FO_A, b $FO_B (expected one at each end)" >&2
		grep -hE 'broken|failover|reset|SWITCH|rdma_cm' cli.log "$D/srv.log" >&2
		false
	}
}

# soft-RoCE has no disassociation: the kernel cannot take a removed
# device's objects from the processes that hold them. rdma_cm's
# DEVICE_REMOVAL reaches b's library thread: the stream fails over (at both
# ends) and b gives back its QP, CQ, MRs and rdma_cm ids, librdmacm closes
# the device, and the removal completes while the stream goes on over TCP.
# (librdmacm closes a removed device only while another one is left, so b
# gets a second soft-RoCE device, on a dummy netdev, for the test.) b's
# counters go with its device: a's show the stream crossed the wire over
# RDMA. Kernel TCP has no such device: no yardstick.
@test "wirefaults: b's rxe device removed during the stream: DEVICE_REMOVAL fails it over at both ends, the removal completes before the stream's end, the stream ends intact" {
	local out at sent rcvd end
	: >"$BATS_TEST_TMPDIR/.rxe_dummy"
	"$PEER" run bash -c 'ip link add rsdummy0 type dummy && ip link set rsdummy0 up &&
		rdma link add rxedummy type rxe netdev rsdummy0'
	fault_stream rsock
	: >"$BATS_TEST_TMPDIR/.rxe_gone"
	# shellcheck disable=SC2016 # b's shell expands them
	peer_start rxedel bash -c 'read -r t0 _ </proc/uptime; rdma link delete rxe0; rc=$?
		read -r t1 _ </proc/uptime; echo "deleted $rc $(awk -v a="$t0" -v b="$t1" "BEGIN { printf \"%.2f\", b - a }") $t1"'
	peer_wait rxedel 20
	out=$(peer_dir rxedel)/out
	[ "$(awk '$1 == "deleted" { print $2 }' "$out")" = 0 ]
	stream_end rsock
	counters_deltas s
	sent=$(delta_of s sent_bytes) rcvd=$(delta_of s rcvd_bytes)
	at=$(awk '$1 == "deleted" { print $4 }' "$out")
	end=$(awk '/closed stream torn down/ { print $3; exit }' "$D/srv.log")
	tap_note "librsock: b's rxe0 removed in $(awk '$1 == "deleted" { print $3 }' "$out") s, $(awk -v a="$at" -v e="$end" 'BEGIN { printf "%.2f", e - a }') s before b's stream ended; a's RoCE bytes sent $sent, received $rcvd; stalls a $STALL_A s, b $STALL_B s; failovers a $FO_A, b $FO_B"
	[ "$sent" -ge 262144 ] && [ "$rcvd" -ge 262144 ]
	grep -q 'rdma_cm: DEVICE_REMOVAL' "$D/srv.log"
	grep -q 'verbs objects given back' "$D/srv.log"
	awk -v a="$at" -v e="$end" 'BEGIN { exit !(a < e) }' || {
		echo "b's stream ended (at $end) before the device's removal completed (at $at)" >&2
		false
	}
	failed_over
}

# readd_echo N: a fresh librsock client in a (its log c-N.log) connects to
# the churn server in b, 16 B out and back, closes; prints its stats line's
# "tcp=T rdma=R". Without the negative cache: a probe b could not answer
# (no device) keeps the next RSOCK_NEG_CACHE_S (30 s) of a's streams to b
# on TCP, which is the cache's rule, not the server's recovery.
readd_echo() {
	bounded 60 env RSOCK_STATS=1 RSOCK_NEG_CACHE_S=0 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/c-$1.log" \
		LD_PRELOAD="$(rsock_preload_value)" python3 "$BATS_TEST_DIRNAME/churn.py" client \
		"$ADDR_B" "$PORT" 1 1 >"c-$1.out" 2>&1 || { cat "c-$1.out" "c-$1.log" >&2; return 1; }
	echo "tcp=$(stat_of "c-$1.log" tcp) rdma=$(stat_of "c-$1.log" rdma)"
}

# The same server process lives through its device's removal and return:
# its beacon (a wildcard rdma_cm listener) hears on the new device, and the
# data listener and device are opened again for the next hello.
@test "wirefaults: b's rxe device removed and added again under a running librsock server: the stream in between takes TCP, the one after takes RDMA again; every echo intact" {
	local D first gone back
	: >"$BATS_TEST_TMPDIR/.rxe_dummy"
	"$PEER" run bash -c 'ip link add rsdummy0 type dummy && ip link set rsdummy0 up &&
		rdma link add rxedummy type rxe netdev rsdummy0'
	D=$(peer_dir srv)
	PORT=$(free_port)
	# shellcheck disable=SC2046 # the env words
	peer_start srv timeout 120 $(rsock_in srv "$D") RSOCK_LOG_LEVEL=debug \
		python3 "$BATS_TEST_DIRNAME/churn.py" serve "$ADDR_B" "$PORT" 3
	peer_wait_port "$PORT"
	first=$(readd_echo 1)
	: >"$BATS_TEST_TMPDIR/.rxe_gone"
	"$PEER" run bash -c 'rdma link delete rxe0'
	gone=$(readd_echo 2)
	"$PEER" run bash -c 'rdma link add rxe0 type rxe netdev eth0'
	rm -f "$BATS_TEST_TMPDIR/.rxe_gone"
	back=$(readd_echo 3)
	peer_wait srv 30
	tap_note "librsock: a fresh client's stream before b's rxe0 went: $first; while it was gone: $gone; once back: $back"
	grep -x 'served 3 echoed 3 failed 0' "$D/out"
	[ "$first" = "tcp=0 rdma=1" ]
	[ "$gone" = "tcp=1 rdma=0" ]
	[ "$back" = "tcp=0 rdma=1" ] || { grep -v 'sent\|received' "$D/srv.log" | tail -n 30 >&2; false; }
}

teardown() {
	peer_cleanup
	if [ -f "$BATS_TEST_TMPDIR/.addr_off" ]; then
		# shellcheck disable=SC2016 # b's shell expands them
		"$PEER" run bash -c 'c=$(cat "$1/cidr" 2>/dev/null) && ! ip -4 -o addr show dev eth0 | grep -q " ${c%/*}/" &&
			ip addr add "$c" dev eth0; true' _ "$(peer_dir addr)"
	fi
	if [ -f "$BATS_TEST_TMPDIR/.rxe_gone" ]; then
		# shellcheck disable=SC2016 # b's shell expands them
		"$PEER" run bash -c 'for _ in $(seq 1 100); do [ -e /sys/class/infiniband/rxe0 ] || break; sleep 0.1; done
			rdma link add rxe0 type rxe netdev eth0 2>/dev/null; true'
	fi
	if [ -f "$BATS_TEST_TMPDIR/.rxe_dummy" ]; then
		"$PEER" run bash -c 'rdma link delete rxedummy; ip link del rsdummy0; true' >/dev/null 2>&1
	fi
	stop_all_bg
}
