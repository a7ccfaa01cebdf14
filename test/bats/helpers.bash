# helpers.bash - shared by the host integration tests (bats-core >= 1.5).
#
# Environment:
#   RSOCK_BUILD_DIR    the build tree (default: the repository root, for an
#                      in-tree build, or the current directory when only it
#                      has a build, as under `make check-bats` in build/);
#                      must hold .libs/librsock.so,
#                      tools/rsock-run and the test programs (`make progs`).
#   RSOCK_LIB          the preload object (default: $RSOCK_BUILD_DIR/.libs/librsock.so).
#   RSOCK_SAN_PRELOAD  sanitizer runtimes (colon-separated, e.g. libasan.so:libubsan.so)
#                      for a sanitized build: put FIRST in LD_PRELOAD.
#
# Nothing is skipped: a missing build product or program fails the test with a
# message saying what to install or build.

RSOCK_SRC_DIR=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
if [ -z "${RSOCK_BUILD_DIR:-}" ]; then
	RSOCK_BUILD_DIR=$RSOCK_SRC_DIR
	# `make check-bats` in a separate build directory runs from there
	if [ ! -e "$RSOCK_SRC_DIR/.libs/librsock.so" ] && [ -e "$PWD/.libs/librsock.so" ]; then
		RSOCK_BUILD_DIR=$PWD
	fi
fi
RSOCK_BUILD_DIR=$(cd "$RSOCK_BUILD_DIR" 2>/dev/null && pwd || echo "$RSOCK_BUILD_DIR")
export RSOCK_BUILD_DIR
export RSOCK_LIB=${RSOCK_LIB:-$RSOCK_BUILD_DIR/.libs/librsock.so}
RSOCK_RUN=$RSOCK_BUILD_DIR/tools/rsock-run
PROGS=$RSOCK_BUILD_DIR/test/progs
SOCKCHECK=$PROGS/sockcheck
FORTIFY=$PROGS/fortify
# early_main links the uninstalled libearly.so: run the real binary with the
# library path libtool's wrapper script would set (the wrapper is a shell
# script, which would put /bin/sh under the preload as well).
EARLY_MAIN=$PROGS/.libs/early_main
EARLY_LIBDIR=$PROGS/.libs

# Seconds a single command may take before it is killed.
: "${RSOCK_TEST_TIMEOUT:=60}"
# Seconds a background server (start_bg) may live: it serves every command of
# its test, so it must outlive several RSOCK_TEST_TIMEOUTs; the test's
# teardown stops it long before in every normal run.
: "${RSOCK_BG_TIMEOUT:=$((RSOCK_TEST_TIMEOUT * 5))}"

# Never let a stray setting of the caller change what the library does.
unset RSOCK_MODE RSOCK_CONF RSOCK_LOG_LEVEL RSOCK_LOG_FILE RSOCK_STATS 2>/dev/null || true

# ---- prerequisites ------------------------------------------------------------

# require_cmd NAME...: fail (never skip) when a program is missing.
require_cmd() {
	local c
	for c in "$@"; do
		if ! command -v "$c" >/dev/null 2>&1; then
			echo "required program '$c' is not installed (scripts/setup.sh installs the test packages)" >&2
			return 1
		fi
	done
}

# require_build: the library, the wrapper and the test programs exist.
require_build() {
	local f
	for f in "$RSOCK_LIB" "$RSOCK_RUN" "$SOCKCHECK" "$FORTIFY" "$EARLY_MAIN" "$EARLY_LIBDIR/libearly.so" "$ERRNOWATCH"; do
		if [ ! -e "$f" ]; then
			echo "missing build product $f (RSOCK_BUILD_DIR=$RSOCK_BUILD_DIR): run 'make && make progs' there" >&2
			return 1
		fi
	done
}

# ---- running under the library ---------------------------------------------------

# The LD_PRELOAD value: sanitizer runtimes first, then librsock.
rsock_preload_value() {
	printf '%s\n' "${RSOCK_SAN_PRELOAD:+$RSOCK_SAN_PRELOAD:}$RSOCK_LIB"
}

# test/progs/errnowatch.c: put in front of librsock, it checks that every
# socket call that succeeds leaves errno alone and every one that fails sets
# it, and writes each breach to the file ERRNOWATCH_LOG.
ERRNOWATCH=$PROGS/.libs/errnowatch.so

# The LD_PRELOAD value with errnowatch in front of librsock.
rsock_preload_watched() {
	printf '%s\n' "${RSOCK_SAN_PRELOAD:+$RSOCK_SAN_PRELOAD:}$ERRNOWATCH:$RSOCK_LIB"
}

# errno_kept LOG...: no errnowatch breach was written to any LOG.
errno_kept() {
	local f bad=0
	for f in "$@"; do
		if [ -s "$f" ]; then
			echo "errno breaches in $f:" >&2
			sort "$f" | uniq -c | sort -rn | head -n 20 >&2
			bad=1
		fi
	done
	return "$bad"
}

# resolve_cmd CMD...: set the array CMD to the real command line for CMD,
# where CMD may start with one of the helper words below (so that bounded,
# timeout and start_bg, which need an executable, accept them too):
#   with_preload CMD...            librsock preloaded with plain LD_PRELOAD
#   with_rsock_run [opts] -- CMD...  through tools/rsock-run
#   in_mode MODE CMD...            MODE: plain, preload (RSOCK_STATS=1) or
#                                  rsockrun (-s: counters printed at exit)
# rsock-run prepends librsock to an LD_PRELOAD it finds: the sanitizer
# runtimes, when given, are passed that way (such runs need
# ASAN_OPTIONS=verify_asan_link_order=0, which scripts/test.sh sets).
resolve_cmd() {
	case "${1:-}" in
	with_preload)
		shift
		CMD=(env "LD_PRELOAD=$(rsock_preload_value)" "$@")
		;;
	with_rsock_run)
		shift
		if [ -n "${RSOCK_SAN_PRELOAD:-}" ]; then
			CMD=(env "LD_PRELOAD=$RSOCK_SAN_PRELOAD" "$RSOCK_RUN" "$@")
		else
			CMD=(env -u LD_PRELOAD "$RSOCK_RUN" "$@")
		fi
		;;
	in_mode)
		local mode=$2
		shift 2
		case "$mode" in
		plain) CMD=(env -u LD_PRELOAD "$@") ;;
		preload) CMD=(env RSOCK_STATS=1 "LD_PRELOAD=$(rsock_preload_value)" "$@") ;;
		rsockrun) resolve_cmd with_rsock_run -s -- "$@" ;;
		*) echo "in_mode: unknown mode $mode" >&2; return 2 ;;
		esac
		;;
	*) CMD=("$@") ;;
	esac
}

with_preload() {
	local CMD
	resolve_cmd with_preload "$@"
	"${CMD[@]}"
}

with_rsock_run() {
	local CMD
	resolve_cmd with_rsock_run "$@"
	"${CMD[@]}"
}

in_mode() {
	local CMD
	resolve_cmd in_mode "$@" || return
	"${CMD[@]}"
}

# bounded [SECONDS] CMD...: run CMD, killed after SECONDS (default RSOCK_TEST_TIMEOUT).
bounded() {
	local t=$RSOCK_TEST_TIMEOUT CMD
	if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
		t=$1
		shift
	fi
	resolve_cmd "$@" || return
	timeout -k 3 "$t" "${CMD[@]}"
}

# ---- ports and background servers ---------------------------------------------------

# port_in_use PORT: some TCP socket (any state) uses PORT locally.
port_in_use() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v h=":$hex" 'NR > 1 && substr($2, length($2) - 4) == h { found = 1 } END { exit !found }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# free_port [N]: print a loopback TCP port nothing uses now, the first of N
# such ports in a row (default 1).
free_port() {
	local p i k
	for i in $(seq 1 200); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
		for ((k = 0; k < ${1:-1}; k++)); do
			port_in_use $((p + k)) && break
		done
		if [ "$k" = "${1:-1}" ]; then
			echo "$p"
			return 0
		fi
	done
	echo "free_port: no free port found" >&2
	return 1
}

# port_listening PORT: a socket listens on PORT (state 0A in /proc/net/tcp*).
port_listening() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v h=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == h { found = 1 } END { exit !found }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# wait_for_port PORT [SECONDS] [PID]: wait until PORT listens (default 15 s);
# fail at once when PID (a background server) died.
wait_for_port() {
	local port=$1 secs=${2:-15} pid=${3:-} i
	for ((i = 0; i < secs * 20; i++)); do
		port_listening "$port" && return 0
		if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
			echo "wait_for_port: the server (pid $pid) exited before listening on $port" >&2
			bg_output "$pid"
			return 1
		fi
		sleep 0.05
	done
	echo "wait_for_port: nothing listens on 127.0.0.1:$port after $secs s" >&2
	return 1
}

# start_bg NAME CMD...: start a server in the background, bounded by
# RSOCK_BG_TIMEOUT, stdout/stderr in $BATS_TEST_TMPDIR/NAME.out/.err, stdin
# from $BG_STDIN (default /dev/null). Sets BG_PID; teardown kills it.
start_bg() {
	local name=$1 CMD
	shift
	resolve_cmd "$@" || return
	timeout -k 3 "$RSOCK_BG_TIMEOUT" "${CMD[@]}" <"${BG_STDIN:-/dev/null}" \
		>"$BATS_TEST_TMPDIR/$name.out" 2>"$BATS_TEST_TMPDIR/$name.err" 3>&- &
	BG_PID=$!
	echo "$BG_PID" >>"$BATS_TEST_TMPDIR/.bg_pids"
	echo "$BG_PID $name" >>"$BATS_TEST_TMPDIR/.bg_names"
}

# bg_output PID: the last lines a background server wrote (stdout, stderr,
# the library's log when it has one),
# to stderr, for a test that fails because of it.
bg_output() {
	local name f rc=0
	name=$(awk -v p="$1" '$1 == p { n = $2 } END { print n }' "$BATS_TEST_TMPDIR/.bg_names" 2>/dev/null)
	[ -n "$name" ] || return 0
	kill -0 "$1" 2>/dev/null || wait "$1" 2>/dev/null || rc=$?
	echo "--- $name (pid $1) exit status $rc" >&2
	for f in "$BATS_TEST_TMPDIR/$name".{out,err,log}; do
		[ -s "$f" ] || continue
		echo "--- last lines of ${f##*/}:" >&2
		tail -n 20 "$f" >&2
	done
}

# wait_bg PID [SECONDS]: wait for a background server to exit by itself;
# returns its exit status (124 when it had to be killed). Safe under set -e
# when called as `wait_bg PID || rc=$?`.
wait_bg() {
	local pid=$1 secs=${2:-20} i rc=0
	for ((i = 0; i < secs * 20; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "wait_bg: pid $pid still running after $secs s: killed" >&2
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		return 124
	fi
	wait "$pid" 2>/dev/null || rc=$?
	return "$rc"
}

# stop_bg PID: stop one server (TERM, then KILL after 3 s), reap it. Never fails.
stop_bg() {
	local pid=$1 i
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 60; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.05
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
	return 0
}

# stop_all_bg: teardown of every test that starts servers.
stop_all_bg() {
	local pid
	[ -f "$BATS_TEST_TMPDIR/.bg_pids" ] || return 0
	while read -r pid; do
		[ -z "$pid" ] || stop_bg "$pid"
	done <"$BATS_TEST_TMPDIR/.bg_pids"
	rm -f "$BATS_TEST_TMPDIR/.bg_pids"
}

# ---- assertions --------------------------------------------------------------------

# same_file A B WHAT: byte-exact, with sizes and digests in the message.
same_file() {
	local a b
	a=$(sha256sum <"$1" | cut -d' ' -f1)
	b=$(sha256sum <"$2" 2>/dev/null | cut -d' ' -f1)
	if [ "$a" != "$b" ]; then
		echo "$3: content differs: $1 ($(stat -c %s "$1") bytes, $a) vs $2 ($(stat -c %s "$2" 2>/dev/null || echo missing) bytes, $b)" >&2
		return 1
	fi
}

# stats_active FILE [PATH]: a librsock stats line with streams >= 1 and
# bytes moved (tx or rx) on PATH (tcp, rdma or shm; any of them without
# PATH) is in FILE.
stats_active() {
	local line p paths=${2:-"tcp rdma shm"}
	line=$(grep -E 'rsock\[[0-9]+:[0-9]+\] info: stats: ' "$1" | tail -n 1)
	if [ -z "$line" ]; then
		echo "no librsock stats line in $1:" >&2
		cat "$1" >&2
		return 1
	fi
	if ! [[ "$line" =~ streams\ tcp=([0-9]+)\ rdma=([0-9]+)\ shm=([0-9]+)\ bytes\ tcp\ tx=([0-9]+)\ rx=([0-9]+)\ rdma\ tx=([0-9]+)\ rx=([0-9]+)\ shm\ tx=([0-9]+)\ rx=([0-9]+) ]]; then
		echo "unparsable stats line: $line" >&2
		return 1
	fi
	local -A streams=([tcp]=${BASH_REMATCH[1]} [rdma]=${BASH_REMATCH[2]} [shm]=${BASH_REMATCH[3]})
	local -A bytes=([tcp]=$((BASH_REMATCH[4] + BASH_REMATCH[5])) [rdma]=$((BASH_REMATCH[6] + BASH_REMATCH[7]))
		[shm]=$((BASH_REMATCH[8] + BASH_REMATCH[9])))
	for p in $paths; do
		[ "${streams[$p]}" -ge 1 ] && [ "${bytes[$p]}" -gt 0 ] && return 0
	done
	echo "librsock did not carry the stream on ${2:-any path}: $line" >&2
	return 1
}

# pg_cluster BIN: a new PostgreSQL cluster owned by postgres (initdb from
# BIN) in PG, a directory that user can reach, with PG/srv.log its to write.
pg_cluster() {
	PG=$(mktemp -d /tmp/rsock-pg.XXXXXX)
	chmod 755 "$PG"
	chown postgres "$PG"
	touch "$PG/srv.log"
	chown postgres "$PG/srv.log"
	bounded 120 runuser -u postgres -- "$1/initdb" -D "$PG/data" -A trust -U postgres >initdb.txt 2>&1 ||
		{ cat initdb.txt >&2; false; }
}

# nginx_conf DIR PORT [WORKERS]: a private, non-daemon nginx in DIR on
# 127.0.0.1:PORT serving DIR/www; one process by default, else a master and
# WORKERS workers (as root).
nginx_conf() {
	local dir=$1 port=$2 workers=${3:-1} procs
	procs="master_process off;
worker_processes 1;"
	[ "$workers" = 1 ] || procs="user root;
worker_processes $workers;"
	mkdir -p "$dir/logs" "$dir/tmp" "$dir/www"
	cat >"$dir/nginx.conf" <<CONF
daemon off;
$procs
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 256; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	client_body_temp_path $dir/tmp/body;
	proxy_temp_path $dir/tmp/proxy;
	fastcgi_temp_path $dir/tmp/fastcgi;
	uwsgi_temp_path $dir/tmp/uwsgi;
	scgi_temp_path $dir/tmp/scgi;
	server {
		listen 127.0.0.1:$port;
		root $dir/www;
	}
}
CONF
}

# rand_file PATH BYTES
rand_file() {
	head -c "$2" /dev/urandom >"$1"
}
