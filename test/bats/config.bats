#!/usr/bin/env bats
# Configuration through the environment and rsock-run, logging, and the
# transparency of exit statuses and output.

load helpers

setup_file() {
	require_build
}

setup() {
	cd "$BATS_TEST_TMPDIR"
	bounded env -u LD_PRELOAD "$FORTIFY" >plain.out 2>plain.err
}

# works_with ENV...: fortify under the preload with ENV set: same stdout and
# exit status as plain; its stderr in pre.err.
works_with() {
	local rc=0
	bounded env "$@" LD_PRELOAD="$(rsock_preload_value)" "$FORTIFY" >pre.out 2>pre.err || rc=$?
	cat pre.err
	[ "$rc" -eq 0 ] || { echo "exit status $rc" >&2; return 1; }
	diff -u plain.out pre.out
}

@test "config: RSOCK_MODE=bogus warns on stderr and the program still works" {
	works_with RSOCK_MODE=bogus
	grep -E '^rsock\[[0-9]+:[0-9]+\] warn: .*RSOCK_MODE=bogus' pre.err
}

@test "config: RSOCK_LOG_LEVEL=bogus warns on stderr and the program still works" {
	works_with RSOCK_LOG_LEVEL=bogus
	grep -E '^rsock\[[0-9]+:[0-9]+\] warn: .*RSOCK_LOG_LEVEL=bogus' pre.err
}

@test "config: a bad RSOCK_STATS and RSOCK_RING_KB warn and are ignored" {
	works_with RSOCK_STATS=maybe RSOCK_RING_KB=lots
	grep -q '^rsock\[.*RSOCK_STATS=maybe' pre.err
	grep -q '^rsock\[.*RSOCK_RING_KB=lots' pre.err
}

@test "config: the transport's variables are range-checked (out of range warns, in range is silent)" {
	works_with RSOCK_POLL_US=20000 RSOCK_PROBE_MS=0 RSOCK_HANDSHAKE_MS=x RSOCK_NEG_CACHE_S=-1 RSOCK_SETTLE_MS=70000 RSOCK_NONBLOCK_MS=-5
	grep -q '^rsock\[.*RSOCK_POLL_US=20000' pre.err
	grep -q '^rsock\[.*RSOCK_PROBE_MS=0' pre.err
	grep -q '^rsock\[.*RSOCK_HANDSHAKE_MS=x' pre.err
	grep -q '^rsock\[.*RSOCK_NEG_CACHE_S=-1' pre.err
	grep -q '^rsock\[.*RSOCK_SETTLE_MS=70000' pre.err
	grep -q '^rsock\[.*RSOCK_NONBLOCK_MS=-5' pre.err
	works_with RSOCK_POLL_US=0 RSOCK_PROBE_MS=500 RSOCK_HANDSHAKE_MS=1000 RSOCK_NEG_CACHE_S=0 RSOCK_SETTLE_MS=0 RSOCK_NONBLOCK_MS=0
	! grep -q 'rsock\[' pre.err || false
}

@test "config: RSOCK_MODE=tcp and RSOCK_MODE=auto are accepted silently" {
	works_with RSOCK_MODE=tcp
	! grep -q 'rsock\[' pre.err || false
	works_with RSOCK_MODE=AUTO
	! grep -q 'rsock\[' pre.err || false
}

@test "config: the default log level prints nothing on a plain TCP program" {
	works_with
	[ ! -s pre.err ]
}

@test "config: RSOCK_LOG_FILE receives the debug log, stderr stays clean" {
	works_with RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$BATS_TEST_TMPDIR/rsock.log"
	[ -s rsock.log ]
	grep -E '^rsock\[[0-9]+:[0-9]+\] debug: ' rsock.log
	! grep -q 'rsock\[' pre.err || false
}

@test "config: RSOCK_LOG_FILE survives closefrom/close_range/dup2 in the program" {
	# sockcheck closes ranges of descriptors and dup2s over numbers; the log
	# descriptor must survive and the output must not change.
	bounded env -u LD_PRELOAD "$SOCKCHECK" >sc.plain 2>&1
	bounded env RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$BATS_TEST_TMPDIR/sc.log" RSOCK_STATS=1 \
		LD_PRELOAD="$(rsock_preload_value)" "$SOCKCHECK" >sc.pre 2>sc.err
	diff -u sc.plain sc.pre
	! grep -q 'rsock\[' sc.err || false
	# the stats line is written at exit, after the program's closefrom()
	grep -q 'info: stats: streams tcp=' sc.log
}

@test "config: RSOCK_LOG_FILE survives a program closing every descriptor one by one" {
	bounded env -u LD_PRELOAD "$SOCKCHECK" --close-all >ca.plain 2>&1
	bounded env RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$BATS_TEST_TMPDIR/ca.log" RSOCK_STATS=1 \
		LD_PRELOAD="$(rsock_preload_value)" "$SOCKCHECK" --close-all >ca.pre 2>ca.err
	cat ca.pre
	# the library's descriptor is invisible: the same closes succeed and fail
	diff -u ca.plain ca.pre
	! grep -q 'rsock\[' ca.err || false
	grep -q 'info: stats: streams tcp=' ca.log
}

@test "config: a process that lets no file grow (RLIMIT_FSIZE 0, as OpenSSH's sandbox) is not killed by a log line" {
	# The stats line at exit would raise SIGXFSZ (the old library's end of
	# sshd's pre-authentication child): the library follows the limit the
	# program sets and writes nothing past it.
	run bounded env RSOCK_LOG_LEVEL=debug RSOCK_LOG_FILE="$BATS_TEST_TMPDIR/fs.log" RSOCK_STATS=1 \
		LD_PRELOAD="$(rsock_preload_value)" "$SOCKCHECK" --fsize0
	[ "$status" -eq 0 ]
	[ "$output" = "fsize0: socket fd, connect to port 0 refused" ]
	grep -q 'librsock .* ready' fs.log
	! grep -q 'info: stats: ' fs.log || false
}

@test "config: RSOCK_LOG_FILE that cannot be opened warns on stderr" {
	works_with RSOCK_LOG_FILE=/nonexistent-dir/rsock.log
	grep -q '^rsock\[.*RSOCK_LOG_FILE=/nonexistent-dir/rsock.log' pre.err
}

@test "config: a rule file with a malformed line warns with its line number" {
	cat >rules.conf <<'CONF'
# comment
use tcp * * 10.0.0.0/8

this is not a rule
use rdma * server *:6379
CONF
	works_with RSOCK_CONF="$BATS_TEST_TMPDIR/rules.conf"
	grep -E '^rsock\[[0-9]+:[0-9]+\] warn: .*rules\.conf:4: ' pre.err
	[ "$(grep -c 'rsock\[' pre.err)" -eq 1 ]
}

@test "config: a missing rule file warns" {
	works_with RSOCK_CONF=/nonexistent/rules.conf
	grep -q '^rsock\[.*RSOCK_CONF=/nonexistent/rules.conf' pre.err
}

@test "config: RSOCK_STATS=1 prints the counters at exit" {
	works_with RSOCK_STATS=1
	stats_active pre.err
}

@test "rsock-run -h prints the usage and exits 0" {
	run bounded with_rsock_run -h
	[ "$status" -eq 0 ]
	[[ "$output" == *"usage: rsock-run"* ]]
	[[ "$output" == *"--lib PATH"* ]]
}

@test "rsock-run with a missing --lib path fails with exit 2" {
	run bounded "$RSOCK_RUN" --lib /nonexistent/librsock.so -- true
	[ "$status" -eq 2 ]
	[[ "$output" == *"/nonexistent/librsock.so"* ]]
}

@test "rsock-run: unknown option and no program exit 2" {
	run bounded "$RSOCK_RUN" --bogus -- true
	[ "$status" -eq 2 ]
	run bounded "$RSOCK_RUN"
	[ "$status" -eq 2 ]
}

@test "rsock-run options reach the library (-m, -l, -L, -s, -c)" {
	cat >r.conf <<'CONF'
bogus line
CONF
	run bounded with_rsock_run -m tcp -l debug -L "$BATS_TEST_TMPDIR/run.log" -s -c "$BATS_TEST_TMPDIR/r.conf" -- "$FORTIFY"
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat plain.out)" ]
	grep -q 'mode=tcp' run.log
	grep -q 'r.conf:1: ' run.log
	grep -q 'info: stats: ' run.log
}

@test "rsock-run honours RSOCK_LIB" {
	run bounded env RSOCK_LIB=/nonexistent/x.so "$RSOCK_RUN" -- true
	[ "$status" -eq 2 ]
	run bounded env RSOCK_LIB="$RSOCK_LIB" "$RSOCK_RUN" -- true
	[ "$status" -eq 0 ]
}

@test "exit status and output unchanged: sh -c 'exit 3'" {
	run bounded with_preload sh -c 'exit 3'
	[ "$status" -eq 3 ]
	run bounded with_rsock_run -- sh -c 'exit 3'
	[ "$status" -eq 3 ]
}

@test "exit status and output unchanged: stdout, stderr and a signal death" {
	local cmd='echo out; echo err >&2; printf "%s\n" "$@"; exit 42'
	bounded sh -c "$cmd" sh a 'b c' >p.out 2>p.err || echo "$?" >p.rc
	bounded with_preload sh -c "$cmd" sh a 'b c' >l.out 2>l.err || echo "$?" >l.rc
	diff p.out l.out
	diff p.err l.err
	diff p.rc l.rc
	[ "$(cat l.rc)" = 42 ]
	rc=0
	bounded with_preload sh -c 'kill -TERM $$' || rc=$?
	[ "$rc" -eq 143 ]
}

@test "the library loads into programs that do no networking (ls, cat, python3)" {
	run bounded with_preload ls "$RSOCK_SRC_DIR/src/init"
	[ "$status" -eq 0 ]
	[[ "$output" == *"init.c"* ]]
	run bounded with_preload sh -c 'printf abc | cat'
	[ "$output" = abc ]
	run bounded with_preload python3 -c 'import socket; a, b = socket.socketpair(); a.sendall(b"x"); print(b.recv(1))'
	[ "$status" -eq 0 ]
	[ "$output" = "b'x'" ]
}

# fallback_sum FILE: prints "STREAMS_TCP SUM_OF_FALLBACKS RULES" of the stats line.
fallback_sum() {
	local line
	line=$(grep -E 'info: stats: ' "$1" | tail -n 1)
	[[ "$line" =~ streams\ tcp=([0-9]+).*fallbacks\ rules=([0-9]+)\ no_device=([0-9]+)\ peer=([0-9]+)\ resources=([0-9]+)\ protocol=([0-9]+)\ not_implemented=([0-9]+) ]] || {
		echo "no parsable stats line in $1" >&2
		return 1
	}
	local r=("${BASH_REMATCH[@]}")
	echo "${r[1]} $((r[2] + r[3] + r[4] + r[5] + r[6] + r[7])) ${r[2]}"
}

@test "stats: every kernel-TCP stream is counted with exactly one fallback reason" {
	# by default most of sockcheck's streams take the same-host path
	bounded env RSOCK_STATS=1 LD_PRELOAD="$(rsock_preload_value)" "$SOCKCHECK" >/dev/null 2>st.err
	cat st.err
	read -r streams sum rules < <(fallback_sum st.err)
	[ "$streams" -ge 1 ]
	[ "$sum" -eq "$streams" ]
	bounded env RSOCK_SHM=0 RSOCK_STATS=1 LD_PRELOAD="$(rsock_preload_value)" "$SOCKCHECK" >/dev/null 2>st.err
	cat st.err
	read -r streams sum rules < <(fallback_sum st.err)
	[ "$streams" -ge 20 ]
	[ "$sum" -eq "$streams" ]
}

@test "stats: with RSOCK_MODE=tcp every fallback is for the rules" {
	run bounded with_rsock_run -m tcp -s -- "$SOCKCHECK"
	[ "$status" -eq 0 ]
	echo "$output" | grep 'info: stats: ' >st.err
	cat st.err
	read -r streams sum rules < <(fallback_sum st.err)
	[ "$streams" -ge 20 ]
	[ "$rules" -eq "$streams" ]
	[ "$sum" -eq "$streams" ]
}

# rules_count RULE: run early_main (one client stream, one accepted stream,
# both on 127.0.0.1) with RULE as the only line of RSOCK_CONF; print how many
# streams the rules sent to TCP.
rules_count() {
	printf '%s\n' "$1" >rule.conf
	bounded env RSOCK_STATS=1 RSOCK_CONF="$BATS_TEST_TMPDIR/rule.conf" LD_PRELOAD="$(rsock_preload_value)" \
		LD_LIBRARY_PATH="$EARLY_LIBDIR" "$EARLY_MAIN" >/dev/null 2>rule.err || { cat rule.err >&2; return 1; }
	if grep -q 'malformed' rule.err; then
		echo "rule rejected: $1" >&2
		cat rule.err >&2
		return 1
	fi
	read -r _ _ rules < <(fallback_sum rule.err)
	echo "$rules"
}

@test "rules: RSOCK_CONF decides per program, role, address and port (rules.h syntax)" {
	local rule want got bad=0
	while IFS='|' read -r want rule; do
		got=$(rules_count "$rule") || { bad=1; continue; }
		if [ "$got" != "$want" ]; then
			echo "rule '$rule': $got of 2 streams on TCP by rule, expected $want" >&2
			bad=1
		fi
	done <<'CASES'
2|use tcp * * *
2|use tcp early_main * *
2|use tcp early_* * *
0|use tcp otherprog * *
1|use tcp * client *
1|use tcp * server *
2|use tcp * * 127.0.0.1
2|use tcp * * 127.0.0.0/8
0|use tcp * * 10.0.0.0/8
0|use tcp * * [::1]
0|use tcp * * *:1-1023
2|use tcp * * 127.0.0.1:1024-65535
0|use rdma * * *
0|# only a comment
CASES
	[ "$bad" -eq 0 ]
}

@test "rules: the first matching rule wins" {
	[ "$(rules_count $'use rdma * client *\nuse tcp * * *')" = 1 ]
	[ "$(rules_count $'use tcp * client *\nuse rdma * * *')" = 1 ]
	[ "$(rules_count $'use rdma * * *\nuse tcp * * *')" = 0 ]
}
