#!/usr/bin/env bats
# Faults of an established stream's RDMA path (doc/design.md, "Errors" and
# "Descriptors, fork, exec": the failover): the link under both rxe devices
# down for a while, or the server's device removed, while both ends write
# checksummed bytes to each other. Over librsock the stream moves to its
# control connection (counted as a failover) and goes on, every byte intact
# and none twice, after it crossed RDMA; the same scenario over kernel TCP
# is the yardstick, with the same outcome.
#
# Guest only (test/vm/vm-run): the faults take the guest's veth pair and
# rxe1 down and make them again as vm-run does.

load ../bats/helpers
load rsock

FAULT_BYTES=3145728 # each way
FAULT_SECS=4        # the writes are spread over this

setup_file() {
	require_build
	require_rdma_env
	if [ "${RSOCK_IN_VM:-0}" != 1 ]; then
		echo "faults.bats takes the guest's veth pair and rxe1 down: run it in the guest (test/rdma/run-suite)" >&2
		return 1
	fi
}

teardown() {
	stop_all_bg
	pair_restore
}

# pair_restore: the RDMA pair as test/vm/vm-run makes it: both veths up,
# the routes that send A<->B over them (a link set down loses them), the
# IPv6 addresses, rxe1 on veth1.
pair_restore() {
	ip link set veth0 up
	ip link set veth1 up
	ip route replace "$ADDR_B" dev veth0 src "$ADDR_A" table 100
	ip route replace "$ADDR_A" dev veth1 src "$ADDR_B" table 101
	if [ -n "$ADDR_A6" ]; then
		ip -6 addr replace "$ADDR_A6/64" dev veth0 nodad
		ip -6 addr replace "$ADDR_B6/64" dev veth1 nodad
		ip -6 route replace "$ADDR_B6" dev veth0 src "$ADDR_A6" table 100
		ip -6 route replace "$ADDR_A6" dev veth1 src "$ADDR_B6" table 101
	fi
	if [ -f "$BATS_TEST_TMPDIR/rxe1.deleted" ]; then
		# the delete returns once no process holds the device
		for _ in $(seq 1 100); do
			[ -e /sys/class/infiniband/rxe1 ] || break
			sleep 0.1
		done
		rdma link add rxe1 type rxe netdev veth1 2>/dev/null || true
		rm -f "$BATS_TEST_TMPDIR/rxe1.deleted"
	fi
}

# The faults, run one second into the stream.
link_cut() { # SECONDS: both veths down, then up again
	ip link set veth0 down
	ip link set veth1 down
	sleep "$1"
	pair_restore
}

device_gone() { # rxe1 (the server's) removed, in the background: rdma link
	# delete returns only once no process holds the device
	touch "$BATS_TEST_TMPDIR/rxe1.deleted"
	(rdma link delete rxe1 >/dev/null 2>&1 &)
}

# fault_pair rsock|tcp FAULT [ARGS...]: test/rdma/pacedpair.py between B
# (server) and A (client), under librsock (logs srv.log, cli.log) or on
# kernel TCP, FAULT run one second in; both ends must print "intact".
fault_pair() {
	local how=$1 port pre=() c
	shift
	port=$(free_port)
	for c in srv cli; do
		if [ "$how" = rsock ]; then
			pre=(RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/$c.log"
				LD_PRELOAD="$(rsock_preload_value)")
		fi
		if [ $c = srv ]; then
			start_bg srv env "${pre[@]}" PYTHONPATH="$BATS_TEST_DIRNAME" \
				python3 "$BATS_TEST_DIRNAME/pacedpair.py" srv "$ADDR_B" "$port" $FAULT_BYTES $FAULT_SECS
			SRV=$BG_PID
			wait_for_port "$port" 15 "$SRV"
			rdma_snapshot
		else
			start_bg cli env "${pre[@]}" PYTHONPATH="$BATS_TEST_DIRNAME" \
				python3 "$BATS_TEST_DIRNAME/pacedpair.py" cli "$ADDR_B" "$port" $FAULT_BYTES $FAULT_SECS
			CLI=$BG_PID
		fi
	done
	# the fault half a second into the stream (over TCP, once both
	# programs run: a Python start takes seconds in the guest)
	local i
	for ((i = 0; i < 200; i++)); do
		if [ "$how" = rsock ]; then
			grep -q 'carried by RDMA' cli.log 2>/dev/null && break
		else
			[ -n "$(ss -Htn state established "dport = :$port" 2>/dev/null)" ] && break
		fi
		sleep 0.1
	done
	if [ "$how" = rsock ]; then
		if ! grep -q 'carried by RDMA' cli.log 2>/dev/null; then
			echo "the stream did not go RDMA:" >&2
			cat cli.log srv.log >&2
			return 1
		fi
		rdma_crossed 20 # RDMA carried the stream before the fault
	fi
	sleep 0.5
	"$@"
	local rc=0 p t
	for ((i = 0; i < 400; i++)); do
		kill -0 "$CLI" 2>/dev/null || kill -0 "$SRV" 2>/dev/null || break
		sleep 0.1
	done
	for p in $(pgrep -f pacedpair.py); do # what a stream that hangs waits in
		for t in /proc/$p/task/*; do
			echo "hangs: $p ${t##*/} $(cat $t/wchan) $(cut -d' ' -f1-2 $t/syscall)" >&2
		done
	done
	wait_bg "$CLI" 1 || rc=$?
	wait_bg "$SRV" 10 || rc=$?
	echo "# $how: server $(cat srv.out) / client $(cat cli.out)" >&3
	if [ $rc != 0 ] || ! grep -q '^intact' srv.out || ! grep -q '^intact' cli.out; then
		cat srv.out srv.err cli.out cli.err >&2
		rdma statistic show >&2
		[ "$how" != rsock ] || tail -n 30 srv.log cli.log >&2
		return 1
	fi
}

# failed_over: both ends counted the failover and carried the stream by RDMA first.
failed_over() {
	local f
	for f in srv cli; do
		stats_rdma $f.log 1 rx
		if [ "$(stat_of $f.log failovers)" != 1 ]; then
			echo "$f: no failover counted: $(stats_line $f.log)" >&2
			grep -iE 'failover|broken|reset' $f.log >&2
			return 1
		fi
	done
}

@test "failover: the link down 3 s, the stream goes on intact over TCP (and over kernel TCP)" {
	fault_pair tcp link_cut 3
	fault_pair rsock link_cut 3
	failed_over
}

@test "failover: the link down 1 s, the stream goes on intact (and over kernel TCP)" {
	fault_pair tcp link_cut 1
	fault_pair rsock link_cut 1
	# a second's outage may pass within the retries, or fail over
	stats_rdma srv.log 1 rx
	echo "# failovers: server $(stat_of srv.log failovers), client $(stat_of cli.log failovers)" >&3
}

# soft-RoCE has no disassociation: the kernel completes `rdma link delete`
# only once no process holds the device, so the stream may run on over RDMA
# to its end (no failover) or fail over; either way every byte is intact.
@test "failover: the server's device removed, the stream goes on intact (and over kernel TCP)" {
	fault_pair tcp true
	fault_pair rsock device_gone
	stats_rdma srv.log 1 rx
	echo "# failovers: server $(stat_of srv.log failovers), client $(stat_of cli.log failovers)" >&3
}
