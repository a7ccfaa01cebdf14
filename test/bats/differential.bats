#!/usr/bin/env bats
# The library is a passthrough on kernel TCP: the deterministic test programs
# print exactly the same, and exit the same, with and without it.

load helpers

setup_file() {
	require_build
}

setup() {
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	stop_all_bg
}

# run_three NAME CMD...: CMD plain, under LD_PRELOAD and under rsock-run;
# stdout, stderr and the exit status must be identical.
run_three() {
	local name=$1 m rc
	shift
	for m in plain preload rsockrun; do
		rc=0
		case $m in
		plain) bounded env -u LD_PRELOAD "$@" >"$name.$m.out" 2>"$name.$m.err" || rc=$? ;;
		preload) bounded with_preload "$@" >"$name.$m.out" 2>"$name.$m.err" || rc=$? ;;
		rsockrun) bounded with_rsock_run -- "$@" >"$name.$m.out" 2>"$name.$m.err" || rc=$? ;;
		esac
		echo "$rc" >"$name.$m.rc"
	done
	for m in preload rsockrun; do
		diff -u "$name.plain.out" "$name.$m.out" || { echo "$name: stdout differs under $m" >&2; return 1; }
		diff -u "$name.plain.err" "$name.$m.err" || { echo "$name: stderr differs under $m" >&2; return 1; }
		diff -u "$name.plain.rc" "$name.$m.rc" || { echo "$name: exit status differs under $m" >&2; return 1; }
	done
	[ "$(cat "$name.plain.rc")" = 0 ] || { echo "$name: exits $(cat "$name.plain.rc") even without the library" >&2; cat "$name.plain.err" >&2; return 1; }
}

@test "sockcheck: same output and exit status plain, under LD_PRELOAD and under rsock-run" {
	run_three sockcheck "$SOCKCHECK"
	grep -q '^sockcheck: end, 0 failed$' sockcheck.plain.out
	# every scenario ran
	for s in v4 v6 vec flags nb err shut sigpipe poll dup unix fork sendfile; do
		grep -q "^$s\." sockcheck.plain.out || { echo "scenario $s missing" >&2; false; }
	done
}

@test "errno: every socket call sockcheck makes that succeeds leaves errno alone, and every one that fails sets it, plain and under the library (errnowatch)" {
	bounded env ERRNOWATCH_LOG="$PWD/plain.errno" LD_PRELOAD="$ERRNOWATCH" "$SOCKCHECK" >plain.out
	bounded env ERRNOWATCH_LOG="$PWD/preload.errno" LD_PRELOAD="$(rsock_preload_watched)" "$SOCKCHECK" >preload.out
	diff -u plain.out preload.out
	errno_kept plain.errno preload.errno
}

@test "sockcheck: output is stable between two plain runs" {
	bounded "$SOCKCHECK" >a.out
	bounded "$SOCKCHECK" >b.out
	diff -u a.out b.out
}

@test "sockcheck --expect-preload: the API sees same-host streams and counts their bytes" {
	run bounded with_preload "$SOCKCHECK" --expect-preload
	# the mismatches (stderr) and the FAIL lines
	echo "$output" | grep -E '^sockcheck: |: FAIL$' | head -40
	[ "$status" -eq 0 ]
	[[ "$output" == *"sockcheck: end, 0 failed"* ]]
}

@test "sockcheck --expect-preload: fails without the library (the check is real)" {
	run bounded env -u LD_PRELOAD "$SOCKCHECK" --expect-preload
	[ "$status" -ne 0 ]
	[[ "$output" == *"not there"* ]]
}

@test "sockcheck --expect-preload under rsock-run, RSOCK_MODE=tcp" {
	RSOCK_EXPECT_TRANSPORT=2 run bounded with_rsock_run -m tcp -- "$SOCKCHECK" --expect-preload
	echo "$output" | grep -E '^sockcheck: |: FAIL$' | head -40
	[ "$status" -eq 0 ]
}

@test "sockcheck --threads: concurrent streams, same output; counters exact, no leaked entries" {
	run_three threads "$SOCKCHECK" --threads
	grep -q '^threads: 4 threads x 250 streams, 0 bad$' threads.plain.out
	run bounded with_preload "$SOCKCHECK" --threads --expect-preload
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "early constructor: libearly's socket I/O before librsock is initialised" {
	run_three early env LD_LIBRARY_PATH="$EARLY_LIBDIR" "$EARLY_MAIN"
	grep -q '^early: ok$' early.plain.out
	grep -q '^early: data.ok: 1$' early.plain.out
}

@test "early constructor: libearly's constructor really runs before librsock's" {
	# LD_DEBUG=files lists the "calling init" order; the early test above is
	# only meaningful when libearly comes first.
	bounded env LD_DEBUG=files LD_PRELOAD="$(rsock_preload_value)" LD_LIBRARY_PATH="$EARLY_LIBDIR" \
		"$EARLY_MAIN" >/dev/null 2>ld.txt
	grep 'calling init:' ld.txt | sed 's/.*calling init: //' >init.txt
	local early rsock
	early=$(grep -n 'libearly\.so' init.txt | cut -d: -f1 | head -n 1)
	rsock=$(grep -n 'librsock\.so' init.txt | cut -d: -f1 | head -n 1)
	cat init.txt
	[ -n "$early" ] && [ -n "$rsock" ]
	[ "$early" -lt "$rsock" ]
}

@test "early constructor: the early descriptors are tracked, on the same-host path" {
	run bounded with_preload env LD_LIBRARY_PATH="$EARLY_LIBDIR" "$EARLY_MAIN" --expect-preload
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "early constructor: connecting to an external server from the constructor" {
	local port
	port=$(free_port)
	start_bg srv with_preload nc -l 127.0.0.1 "$port"
	local pid=$BG_PID
	wait_for_port "$port" 15 "$pid"
	run bounded with_preload env EARLY_PORT="$port" LD_LIBRARY_PATH="$EARLY_LIBDIR" "$EARLY_MAIN" --expect-preload
	echo "$output"
	[ "$status" -eq 0 ]
	wait_bg "$pid" 10
	[ "$(cat "$BATS_TEST_TMPDIR/srv.out")" = "early-bird" ]
}

@test "FORTIFY: the test program really calls the _chk entry points" {
	run nm -D "$FORTIFY"
	[ "$status" -eq 0 ]
	for s in __read_chk __recv_chk __recvfrom_chk __poll_chk __ppoll_chk; do
		echo "$output" | grep -Eq "^ +U $s(@|$)" || { echo "fortify does not import $s" >&2; false; }
	done
}

@test "FORTIFY: same output plain, under LD_PRELOAD and under rsock-run" {
	run_three fortify "$FORTIFY"
	grep -q '^fortify: end$' fortify.plain.out
	grep -q '^read_chk.data: fortified-read$' fortify.plain.out
}

@test "FORTIFY: an overlong length still aborts under the library" {
	bounded env -u LD_PRELOAD "$FORTIFY" --overflow >plain.out 2>/dev/null
	bounded with_preload "$FORTIFY" --overflow >pre.out 2>/dev/null
	diff -u plain.out pre.out
	grep -q '^read_chk.overflow: SIGABRT$' pre.out
	grep -q '^recv_chk.overflow: SIGABRT$' pre.out
}
