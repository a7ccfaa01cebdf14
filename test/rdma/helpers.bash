# helpers.bash - shared by the RDMA suites (test/rdma/*.bats), which run in
# the soft-RoCE guest (test/vm/vm-run) or on a host with an RDMA device; see
# test/rdma/run-suite and test/vm/README.md.
#
# Environment (set by the guest, or by the user on an RDMA host):
#   RSOCK_TEST_ADDR_A, RSOCK_TEST_ADDR_B   two local IPv4 addresses on RDMA
#                        devices, with an RDMA path between them
#   RSOCK_TEST_ADDR_PLAIN, RSOCK_TEST_ADDR_PLAIN_PEER   two addresses with
#                        kernel networking but no RDMA path (optional on a host)
#   RSOCK_IN_VM=1        set in the guest; RSOCK_VM_BOOT_S: its boot time
#   RSOCK_TEST_TIMEOUT   seconds a single command may take (default 60)
#
# Nothing here skips: a missing program or address fails the test.

RSOCK_SRC_DIR=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
RDMA_COUNTERS=$RSOCK_SRC_DIR/test/vm/rdma-counters
: "${RSOCK_TEST_TIMEOUT:=60}"

ADDR_A=${RSOCK_TEST_ADDR_A:-}
ADDR_B=${RSOCK_TEST_ADDR_B:-}
ADDR_PLAIN=${RSOCK_TEST_ADDR_PLAIN:-}
ADDR_PLAIN_PEER=${RSOCK_TEST_ADDR_PLAIN_PEER:-}

# require_cmd NAME...: fail (never skip) when a program is missing.
require_cmd() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 && continue
		echo "required program '$c' is not installed (test/vm/vm-run installs the RDMA tools in the guest's host)" >&2
		return 1
	done
}

# require_addrs [plain]: the RDMA addresses (and the plain pair) are set.
require_addrs() {
	if [ -z "$ADDR_A" ] || [ -z "$ADDR_B" ]; then
		echo "RSOCK_TEST_ADDR_A and RSOCK_TEST_ADDR_B are not set: run the suite with test/rdma/run-suite" >&2
		return 1
	fi
	if [ "${1:-}" = plain ] && { [ -z "$ADDR_PLAIN" ] || [ -z "$ADDR_PLAIN_PEER" ]; }; then
		echo "RSOCK_TEST_ADDR_PLAIN and RSOCK_TEST_ADDR_PLAIN_PEER are not set" >&2
		return 1
	fi
}

# tap_note TEXT: a TAP comment in the suite's output ("# TEXT").
tap_note() {
	echo "# $*" >&3
}

# rdma_dev_of ADDR: the RDMA device whose GID table holds the IPv4 address.
rdma_dev_of() {
	local gid want
	# shellcheck disable=SC2086 # split the address into its four numbers
	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${1//./ })
	# One grep over every entry of every GID table (rxe has 1024 a port;
	# unused ones fail to read): 0.6 s in the TCG guest, where a shell
	# read of each entry took 1.6 s a call (the testbed's perftest tests
	# call this twice or four times).
	gid=$(grep -lxF "$want" /sys/class/infiniband/*/ports/*/gids/* 2>/dev/null | head -n 1)
	if [ -n "$gid" ]; then
		gid=${gid%/ports/*}
		echo "${gid##*/}"
		return 0
	fi
	echo "no RDMA device has the address $1 in its GID table" >&2
	return 1
}

# ---- background programs ------------------------------------------------------

BG_PIDS=()

# bg_start LOG CMD...: run CMD in the background (bounded by
# RSOCK_TEST_TIMEOUT), its output in LOG; teardown_bg stops it.
# fd 3 must be closed in it, or bats waits for it to end.
bg_start() {
	local log=$1
	shift
	timeout "$RSOCK_TEST_TIMEOUT" "$@" >"$log" 2>&1 3>&- &
	BG_PIDS+=($!)
}

# bg_wait: wait for the background programs; fails unless all exit 0.
bg_wait() {
	local p rc=0
	for p in "${BG_PIDS[@]}"; do
		wait "$p" || rc=$?
	done
	BG_PIDS=()
	return $rc
}

# teardown_bg: stop what is left (call from teardown).
teardown_bg() {
	local p
	for p in "${BG_PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${BG_PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	BG_PIDS=()
}

# ---- waiting for servers --------------------------------------------------------

# wait_for_port PORT [TIMEOUT_S]: until a kernel TCP socket listens on PORT.
wait_for_port() {
	local port=$1 deadline=$((SECONDS + ${2:-30}))
	until [ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ]; do
		if [ $SECONDS -ge $deadline ]; then
			echo "nothing listens on TCP port $port after ${2:-30} s" >&2
			return 1
		fi
		sleep 0.1
	done
}

# wait_for_rdma_listen PORT [TIMEOUT_S]: until an rdma_cm id listens on PORT
# (rdma_cm listeners do not appear in ss; `rdma resource show cm_id` lists them).
wait_for_rdma_listen() {
	local port=$1 deadline=$((SECONDS + ${2:-30}))
	until rdma resource show cm_id 2>/dev/null | grep -qE "state LISTEN .*src-addr [^ ]*:$port( |$)"; do
		if [ $SECONDS -ge $deadline ]; then
			echo "no rdma_cm listener on port $port after ${2:-30} s" >&2
			rdma resource show cm_id >&2 || true
			return 1
		fi
		sleep 0.1
	done
}

# ---- RDMA counters ----------------------------------------------------------------
# One rdma-counters call costs ~1 s in the TCG guest: take a snapshot, run
# the traffic, then read all the deltas at once with counters_deltas.

# counters_snapshot NAME: save the RDMA counters of every port.
counters_snapshot() {
	"$RDMA_COUNTERS" snapshot "$BATS_TEST_TMPDIR/counters-$1"
}

# counters_deltas NAME: compute the growth of every counter of every port
# since the snapshot NAME, for delta_of (one rdma-counters call).
counters_deltas() {
	"$RDMA_COUNTERS" --per-port delta "$BATS_TEST_TMPDIR/counters-$1" >"$BATS_TEST_TMPDIR/deltas-$1"
}

# delta_of NAME COUNTER [DEV]: from the last counters_deltas NAME, how much
# COUNTER grew, summed over all devices or over DEV's ports (no new process).
delta_of() {
	local key name v sum=0 found=0
	while read -r key name v; do
		[ "$name" = "$2" ] || continue
		[ -z "${3:-}" ] || [ "${key%/*}" = "$3" ] || continue
		sum=$((sum + v)) found=1
	done <"$BATS_TEST_TMPDIR/deltas-$1"
	if [ $found = 0 ]; then
		echo "no counter $2${3:+ on $3} in the deltas '$1'" >&2
		return 1
	fi
	echo "$sum"
}

# counters_delta NAME COUNTER [DEV]: counters_deltas and delta_of in one.
counters_delta() {
	counters_deltas "$1" && delta_of "$@"
}

# assert_rdma_traffic NAME MIN_PKTS [MIN_BYTES]: at least MIN_PKTS packets
# (and MIN_BYTES bytes, where the devices have a byte counter) were sent
# over RDMA devices since the snapshot NAME. Leaves the deltas for delta_of;
# prints them on failure.
assert_rdma_traffic() {
	local pkts bytes
	counters_deltas "$1" || return 1
	pkts=$(delta_of "$1" sent_pkts) || return 1
	if [ "$pkts" -lt "$2" ]; then
		echo "RDMA devices sent $pkts packets since the snapshot '$1', expected at least $2; per port:" >&2
		grep -v ' 0$' "$BATS_TEST_TMPDIR/deltas-$1" >&2
		return 1
	fi
	[ -n "${3:-}" ] || return 0
	if ! bytes=$(delta_of "$1" sent_bytes 2>/dev/null); then
		echo "(these RDMA devices have no byte counter: packets are the witness)" >&2
		return 0
	fi
	if [ "$bytes" -lt "$3" ]; then
		echo "RDMA devices sent $bytes bytes since the snapshot '$1', expected at least $3; per port:" >&2
		grep -v ' 0$' "$BATS_TEST_TMPDIR/deltas-$1" >&2
		return 1
	fi
}
