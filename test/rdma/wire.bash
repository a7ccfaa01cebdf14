# wire.bash - fixtures of the suites that run on two hosts joined by a wire:
# guest a of test/vm/vm-pair, where these tests run, and guest b, where
# test/vm/peer runs their other ends (test/vm/README.md, "Two guests on a
# wire"). Load after rsock. A suite that needs the pair says so with a line
# "# test bed: vm-pair" in its first lines: test/rdma/run-suite runs it there.
#
# Environment (set by test/vm/vm-pair in guest a):
#   RSOCK_VM_PAIR=a, RSOCK_VM_PAIR_SHARE   the pair's share (/run/rsock-pair)
#   RSOCK_TEST_ADDR_A, _A6                 this guest's addresses (eth0, rxe0)
#   RSOCK_TEST_ADDR_B, _B6                 guest b's addresses (eth0, rxe0)

PEER=$RSOCK_SRC_DIR/test/vm/peer
# shellcheck disable=SC2034 # for the suites
WIRESTREAM=$RSOCK_SRC_DIR/test/rdma/wirestream.py

setup_file() {
	require_build
	require_rdma_env
	require_pair
}

teardown() {
	peer_cleanup
	stop_all_bg
}

# require_pair: this is guest a of a pair.
require_pair() {
	if [ "${RSOCK_VM_PAIR:-}" != a ] || [ ! -d "${RSOCK_VM_PAIR_SHARE:-}" ]; then
		echo "this suite runs in guest a of test/vm/vm-pair: run it through test/rdma/run-suite" >&2
		return 1
	fi
}

# peer_start NAME CMD...: CMD in guest b as job NAME (its working directory
# peer_dir NAME, shared), stopped by the test's teardown.
peer_start() {
	echo "$1" >>"$BATS_TEST_TMPDIR/.peer_jobs"
	"$PEER" start "$@"
}

# peer_dir NAME: the job's directory (the same path in both guests).
peer_dir() {
	echo "$RSOCK_VM_PAIR_SHARE/jobs/$1"
}

# peer_wait NAME [SECONDS]: job NAME ended with status 0 (default 60 s);
# else its output on stderr.
peer_wait() {
	local rc=0 d
	"$PEER" wait "$1" "${2:-60}" || rc=$?
	[ $rc = 0 ] && return 0
	d=$(peer_dir "$1")
	echo "--- guest b's job $1 ended with status $rc; its output:" >&2
	tail -n 20 "$d/out" "$d/err" >&2 2>/dev/null
	return 1
}

# peer_wait_port PORT: until a kernel TCP socket listens on PORT in guest b.
peer_wait_port() {
	"$PEER" wait-port "$1" "${2:-30}"
}

# peer_wait_rdma_listen PORT [SECONDS]: until an rdma_cm id listens on PORT
# in guest b (rdma_cm listeners are invisible to ss).
peer_wait_rdma_listen() {
	# shellcheck disable=SC2016 # b's shell expands them
	"$PEER" run timeout "${2:-30}" bash -c \
		'until rdma resource show cm_id | grep -qE "state LISTEN .*src-addr [^ ]*:$1( |$)"; do sleep 0.1; done' _ "$1" || {
		echo "no rdma_cm listener on port $1 in b after ${2:-30} s" >&2
		return 1
	}
}

# link_off [a|b|both] / link_on [a|b|both]: the host cuts / restores the
# wire (QMP set_link); the teardown restores a wire the test left cut.
link_off() {
	: >"$BATS_TEST_TMPDIR/.link_off"
	"$PEER" link off "${1:-both}"
}

link_on() {
	"$PEER" link on "${1:-both}" && rm -f "$BATS_TEST_TMPDIR/.link_off"
}

# link_cut SECONDS [a|b|both]: the host cuts the wire for SECONDS (its own
# clock) and restores it; prints how long it was off.
link_cut() {
	: >"$BATS_TEST_TMPDIR/.link_off"
	"$PEER" link cut "$1" "${2:-both}" && rm -f "$BATS_TEST_TMPDIR/.link_off"
}

# peer_cleanup: stop the test's jobs in b, restore the wire (and b's NIC).
peer_cleanup() {
	local name
	if [ -f "$BATS_TEST_TMPDIR/.peer_jobs" ]; then
		while read -r name; do
			"$PEER" stop "$name" >/dev/null 2>&1
		done <"$BATS_TEST_TMPDIR/.peer_jobs"
		rm -f "$BATS_TEST_TMPDIR/.peer_jobs"
	fi
	if [ -f "$BATS_TEST_TMPDIR/.link_off" ]; then
		"$PEER" link on both
		"$PEER" run ip link set eth0 up
		ip link set eth0 up
		rm -f "$BATS_TEST_TMPDIR/.link_off"
	fi
	return 0
}

# stream_pair SRV_ADDR CLI_ADDR BYTES PACE_MS SRV_ENV CLI_ENV: wirestream.py
# serves in b (its output peer_dir srv/out) and its client runs in a in the
# background (cli.out), SRV_ENV / CLI_ENV in front of each (e.g. env
# LD_PRELOAD=...); sets CLI_PID.
stream_pair() {
	local srv=$1 cli=$2 n=$3 pace=$4 port
	port=$(free_port)
	# shellcheck disable=SC2086 # the env words
	peer_start srv timeout 120 $5 python3 "$WIRESTREAM" srv "$srv" "$port" "$n" 1 "$pace"
	peer_wait_port "$port"
	# shellcheck disable=SC2086
	start_bg cli $6 python3 "$WIRESTREAM" cli "$srv" "$port" "$n" 2 "$pace" "$cli"
	# shellcheck disable=SC2034 # for the suites
	CLI_PID=$BG_PID
}

# rsock_in NAME DIR: the environment words of a librsock process logging to
# DIR/NAME.log with its counters
rsock_in() {
	echo env RSOCK_STATS=1 RSOCK_LOG_FILE="$2/$1.log" LD_PRELOAD="$(rsock_preload_value)"
}

# The RDMA counters of both guests, each with its own rxe device:
# wire_snapshot NAME (a's here, b's in b at the same time), then
# wire_deltas NAME; then delta_of NAME COUNTER (a's) and delta_of b-NAME
# COUNTER (b's). About 1 s each in the TCG guests.
wire_snapshot() {
	local f=$RSOCK_VM_PAIR_SHARE/counters-$1
	"$PEER" run "$RDMA_COUNTERS" snapshot "$f" &
	counters_snapshot "$1"
	wait $!
}

wire_deltas() {
	local f=$RSOCK_VM_PAIR_SHARE/counters-$1
	"$PEER" run "$RDMA_COUNTERS" --per-port delta "$f" >"$BATS_TEST_TMPDIR/deltas-b-$1" &
	counters_deltas "$1"
	wait $!
}

# wire_crossed NAME BYTES_AB BYTES_BA: since the snapshot, a's rxe sent at
# least BYTES_AB and b's received them, b's sent at least BYTES_BA and a's
# received them (RoCEv2 bytes on eth0, test/vm/rdma-counters); a TAP note.
wire_crossed() {
	local at ar bt br
	wire_deltas "$1" || return 1
	at=$(delta_of "$1" sent_bytes) && ar=$(delta_of "$1" rcvd_bytes) &&
		bt=$(delta_of "b-$1" sent_bytes) && br=$(delta_of "b-$1" rcvd_bytes) || return 1
	tap_note "RoCE bytes: a sent $at, b received $br; b sent $bt, a received $ar"
	if [ "$at" -lt "$2" ] || [ "$br" -lt "$2" ] || [ "$bt" -lt "$3" ] || [ "$ar" -lt "$3" ]; then
		echo "expected at least $2 bytes a -> b and $3 b -> a on the rxe devices" >&2
		return 1
	fi
}

# wire_quiet NAME MAX: since the snapshot, neither rxe device sent more
# than MAX bytes (the stream stayed on kernel TCP).
wire_quiet() {
	local at bt
	wire_deltas "$1" || return 1
	at=$(delta_of "$1" sent_bytes) && bt=$(delta_of "b-$1" sent_bytes) || return 1
	tap_note "RoCE bytes: a sent $at, b sent $bt"
	if [ "$at" -gt "$2" ] || [ "$bt" -gt "$2" ]; then
		echo "the rxe devices carried more than $2 bytes" >&2
		return 1
	fi
}

# streams_match A_OUT B_OUT: two wirestream.py outputs: each end got what
# the other sent (bytes and SHA-256).
streams_match() {
	local as ag bs bg
	as=$(awk '$1 == "sent" { print $2, $3 }' "$1") ag=$(awk '$1 == "got" { print $2, $3 }' "$1")
	bs=$(awk '$1 == "sent" { print $2, $3 }' "$2") bg=$(awk '$1 == "got" { print $2, $3 }' "$2")
	if [ -z "$as" ] || [ "$as" != "$bg" ] || [ -z "$bs" ] || [ "$bs" != "$ag" ]; then
		echo "the streams differ: a sent '$as', b got '$bg'; b sent '$bs', a got '$ag'" >&2
		cat "$1" "$2" >&2
		return 1
	fi
}

# stall_of OUT: the longest wait for bytes (s) a wirestream.py end saw.
stall_of() {
	awk '$1 == "stall" { print $2 }' "$1"
}
