# rsock.bash - what the RDMA suites of librsock share, on top of
# test/bats/helpers.bash (load that first): the test addresses, assertions on
# librsock's own counters, and on the RDMA device counters.
#
# Environment (set by test/vm/vm-run in the guest, by the user on an RDMA host):
#   RSOCK_TEST_ADDR_A, RSOCK_TEST_ADDR_B     two local addresses on RDMA-capable netdevs
#   RSOCK_TEST_ADDR_A6, RSOCK_TEST_ADDR_B6   the same pair's IPv6 addresses (the IPv6 tests)
#   RSOCK_TEST_ADDR_PLAIN_PEER               an address with no RDMA path (optional)

RSOCK_COUNTERS=$RSOCK_SRC_DIR/test/vm/rdma-counters

# The fixtures of every file that loads this one (a file may define its
# own after its load line): the build and the two RDMA addresses are
# required once per file, each test runs in a directory of its own, and the
# programs a test started in the background stop with it.
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

# require_rdma_env: the addresses are set and an RDMA device exists.
require_rdma_env() {
	if [ -z "${RSOCK_TEST_ADDR_A:-}" ] || [ -z "${RSOCK_TEST_ADDR_B:-}" ]; then
		echo "RSOCK_TEST_ADDR_A and RSOCK_TEST_ADDR_B are not set: run through test/rdma/run-suite" >&2
		return 1
	fi
	if ! ls /sys/class/infiniband/ 2>/dev/null | grep -q .; then
		echo "no RDMA device on this machine: run through test/rdma/run-suite" >&2
		return 1
	fi
}

# The pair's addresses are one host's (the guest's two devices): without
# this the same-host path would carry the streams the suite sends over RDMA.
export RSOCK_SHM=${RSOCK_SHM:-0}

ADDR_A=${RSOCK_TEST_ADDR_A:-}
ADDR_B=${RSOCK_TEST_ADDR_B:-}
ADDR_A6=${RSOCK_TEST_ADDR_A6:-}
ADDR_B6=${RSOCK_TEST_ADDR_B6:-}
ADDR_PLAIN_PEER=${RSOCK_TEST_ADDR_PLAIN_PEER:-}

# require_ipv6_env: the IPv6 addresses of the pair are set (never a skip).
require_ipv6_env() {
	if [ -z "$ADDR_A6" ] || [ -z "$ADDR_B6" ]; then
		echo "RSOCK_TEST_ADDR_A6 and RSOCK_TEST_ADDR_B6 are not set (the guest sets them; on an RDMA host set two IPv6 addresses of the RDMA pair)" >&2
		return 1
	fi
}

# rdma_pkts: packets sent by every RDMA device port so far.
rdma_pkts() {
	if [ -x "$RSOCK_COUNTERS" ]; then
		"$RSOCK_COUNTERS" sent_pkts
	else
		cat /sys/class/infiniband/*/ports/*/hw_counters/sent_pkts 2>/dev/null | awk '{s += $1} END {print s + 0}'
	fi
}

# rsock_env NAME: the environment of a librsock process whose stats and log
# go to NAME.log (for `env $(rsock_env NAME) PROGRAM ...`).
rsock_env() {
	echo RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/$1.log" LD_PRELOAD="$(rsock_preload_value)"
}

# path_env tcp|rdma NAME: the environment of a program on kernel TCP or on
# librsock (preloaded for rdma only), its counters and log in NAME.log
# either way; for `env $(path_env ...)`.
path_env() {
	if [ "$1" = rdma ]; then
		rsock_env "$2"
	else
		echo RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/$2.log"
	fi
}

# rdma_snapshot / rdma_crossed MIN: at least MIN packets crossed an RDMA
# device since the snapshot (the device's own witness, not ours).
rdma_snapshot() {
	RDMA_PKTS_BEFORE=$(rdma_pkts)
}

rdma_crossed() {
	local now d
	now=$(rdma_pkts)
	d=$((now - RDMA_PKTS_BEFORE))
	if [ "$d" -lt "$1" ]; then
		echo "only $d packets crossed an RDMA device (expected >= $1)" >&2
		return 1
	fi
	echo "# $d packets crossed the RDMA devices" >&3
}

# stats_line FILE: the last librsock stats line in FILE.
stats_line() {
	local line
	line=$(grep -E 'rsock\[[0-9]+:[0-9]+\] info: stats: ' "$1" 2>/dev/null | tail -n 1)
	if [ -z "$line" ]; then
		echo "no librsock stats line in $1:" >&2
		cat "$1" >&2 2>/dev/null
		return 1
	fi
	printf '%s\n' "$line"
}

# stats_rdma FILE MIN tx|rx: a stream was carried by RDMA and at least MIN
# bytes moved over RDMA in that direction.
stats_rdma() {
	local line n
	line=$(stats_line "$1") || return 1
	[[ "$line" =~ streams\ tcp=([0-9]+)\ rdma=([0-9]+).*rdma\ tx=([0-9]+)\ rx=([0-9]+) ]] || {
		echo "unparsable stats line: $line" >&2
		return 1
	}
	if [ "${BASH_REMATCH[2]}" -lt 1 ]; then
		echo "no stream was carried by RDMA: $line" >&2
		cat "$1" >&2
		return 1
	fi
	if [ "$3" = tx ]; then n=${BASH_REMATCH[3]}; else n=${BASH_REMATCH[4]}; fi
	if [ "$n" -lt "$2" ]; then
		echo "only $n bytes $3 over RDMA (expected >= $2): $line" >&2
		return 1
	fi
}

# stats_tcp FILE REASON: every stream stayed on kernel TCP, at least one
# fallback was counted for REASON, and no stream used RDMA.
stats_tcp() {
	local line
	line=$(stats_line "$1") || return 1
	[[ "$line" =~ streams\ tcp=([0-9]+)\ rdma=([0-9]+) ]] || {
		echo "unparsable stats line: $line" >&2
		return 1
	}
	if [ "${BASH_REMATCH[1]}" -lt 1 ] || [ "${BASH_REMATCH[2]}" -ne 0 ]; then
		echo "expected kernel TCP only: $line" >&2
		return 1
	fi
	if ! [[ "$line" =~ [\ ]$2=([1-9][0-9]*) ]]; then
		echo "no fallback counted for '$2': $line" >&2
		return 1
	fi
}

# The stats line's count NAME=N of a log.
stat_of() {
	stats_line "$1" | grep -oE "(^| )$2=[0-9]+" | tail -n 1 | cut -d= -f2
}

# stats_only_rdma FILE: at least one stream, and every stream carried by RDMA
# (none fell back: concurrent connects included).
stats_only_rdma() {
	local line
	line=$(stats_line "$1") || return 1
	[[ "$line" =~ streams\ tcp=([0-9]+)\ rdma=([0-9]+) ]] || {
		echo "unparsable stats line: $line" >&2
		return 1
	}
	if [ "${BASH_REMATCH[1]}" -ne 0 ] || [ "${BASH_REMATCH[2]}" -lt 1 ]; then
		echo "expected RDMA streams only: $line" >&2
		return 1
	fi
}

# differential PROG [SERVER_ADDR CLIENT_ADDR]: run a differential program
# (test/progs/pair.h; default addresses B and A) over
# kernel TCP, then over librsock (RDMA asserted per stream and by the device
# counters), and compare what the application observed, errno after every
# socket call included (errnowatch).
differential() {
	local prog=$1 srv=${2:-$ADDR_B} cli=${3:-$ADDR_A} port
	port=$(free_port)
	bounded 120 env ERRNOWATCH_LOG="$PWD/tcp.errno" LD_PRELOAD="$ERRNOWATCH" \
		"$PROGS/$prog" "$srv" "$cli" "$port" >tcp.txt 2>tcp.err || {
		cat tcp.txt tcp.err >&2
		false
	}
	port=$(free_port)
	rdma_snapshot
	bounded 120 env RSOCK_EXPECT_TRANSPORT=3 RSOCK_STATS=1 RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$PWD/rdma.log" \
		ERRNOWATCH_LOG="$PWD/rdma.errno" LD_PRELOAD="$(rsock_preload_watched)" \
		"$PROGS/$prog" "$srv" "$cli" "$port" >rdma.txt 2>rdma.err || {
		cat rdma.txt rdma.err rdma.log >&2
		false
	}
	diff -u tcp.txt rdma.txt >&2
	errno_kept tcp.errno rdma.errno
	rdma_crossed 20
	echo "# $(wc -l <tcp.txt) observations identical over kernel TCP and RDMA" >&3
}

# ---- echo and upload pairs (negotiation, datapath and forkexec.bats) -------

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

# build_sockbench: bench/sockbench.c built as ./sb (plain socket calls, which
# either preload library takes)
build_sockbench() {
	cc -O2 -I"$RSOCK_SRC_DIR/include" -o sb "$RSOCK_SRC_DIR/bench/sockbench.c" -ldl -lpthread
}

# pair_failed: what a failed client and server test shows (the server's
# output, srv.out, and the end of both ends' librsock logs); fails.
pair_failed() {
	echo "server's output:"
	cat srv.out
	tail -n 20 cli.log srv.log
	false
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
