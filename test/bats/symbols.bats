#!/usr/bin/env bats
# The exported interface of librsock.so: exactly the 74 names of
# exports.list (plus nothing but rsock_* names), and at run time each libc
# name used by a program binds to librsock.so under the preload
# (LD_DEBUG=bindings with LD_BIND_NOW=1, so every reference is resolved at
# start-up). One test per symbol. Generated from exports.list; keep in sync.

load helpers

setup_file() {
	require_build
	require_cmd nm
	local d=$BATS_FILE_TMPDIR
	nm -D --defined-only "$RSOCK_LIB" >"$d/nm.txt"
	# The names the library defines (the symbol type is column 2).
	awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' "$d/nm.txt" | sort -u >"$d/defined.txt"
	LD_BIND_NOW=1 LD_DEBUG=bindings bounded with_preload "$SOCKCHECK" --noop >/dev/null 2>"$d/bind.sockcheck.txt" || true
	LD_BIND_NOW=1 LD_DEBUG=bindings bounded with_preload "$FORTIFY" >/dev/null 2>"$d/bind.fortify.txt" || true
	# The API: a program that only looks the names up with dlsym.
	LD_DEBUG=bindings bounded with_preload "$SOCKCHECK" --expect-preload >/dev/null 2>"$d/bind.api.txt" || true
}

# check_export NAME PROGRAM
check_export() {
	local name=$1 prog=$2 d=$BATS_FILE_TMPDIR
	if ! grep -qxF -- "$name" "$d/defined.txt"; then
		echo "librsock.so does not export $name; nm -D --defined-only says:" >&2
		cat "$d/nm.txt" >&2
		return 1
	fi
	# "binding file X [0] to /path/librsock.so [0]: normal symbol `NAME'"
	if ! grep -Eq "to [^ ]*librsock\.so \[[0-9]+\]: normal symbol \`$name'" "$d/bind.$prog.txt"; then
		echo "under the preload, $prog's $name is not bound to librsock.so:" >&2
		grep -E "symbol \`$name'" "$d/bind.$prog.txt" >&2 || echo "(no binding of $name at all)" >&2
		return 1
	fi
}

@test "exports: nothing but the listed names and rsock_* is exported" {
	local extra
	extra=$(grep -v '^#' "$BATS_TEST_DIRNAME/exports.list" | awk 'NF { print $1 }' | sort -u |
		comm -13 - "$BATS_FILE_TMPDIR/defined.txt" | grep -v '^rsock_' || true)
	if [ -n "$extra" ]; then
		echo "librsock.so exports names it must not: $extra" >&2
		return 1
	fi
}

@test "exports: the list matches src/librsock.map" {
	local map=$RSOCK_SRC_DIR/src/librsock.map
	[ -r "$map" ]
	# the names between "global:" and "local:", without the rsock_* pattern
	sed -n '/global:/,/local:/p' "$map" | sed 's/global://; s/local://' | tr ';' '\n' |
		tr -d ' \t' | grep -v -e '^$' -e '^rsock_\*$' -e '^[{}]' | sort -u >"$BATS_TEST_TMPDIR/map.txt"
	grep -v '^#' "$BATS_TEST_DIRNAME/exports.list" | awk 'NF && $2 != "api" { print $1 }' | sort -u >"$BATS_TEST_TMPDIR/list.txt"
	diff -u "$BATS_TEST_TMPDIR/map.txt" "$BATS_TEST_TMPDIR/list.txt"
}

@test "imports: librsock.so takes no rdma-core function from the dynamic linker (src/base/rdmacore.c binds them at the first RDMA need)" {
	local undef
	undef=$(nm -D --undefined-only "$RSOCK_LIB" | awk '{ print $NF }' | grep -E '^(ibv|rdma|mlx|rxe)_' || true)
	if [ -n "$undef" ]; then
		echo "librsock.so leaves these to the dynamic linker; add them to rdmacore.c's table: $undef" >&2
		return 1
	fi
	! ldd "$RSOCK_LIB" | grep -Eq 'lib(rdmacm|ibverbs)\.so'
}

@test "exports: the list has the 74 names" {
	[ "$(grep -v '^#' "$BATS_TEST_DIRNAME/exports.list" | awk 'NF' | wc -l)" -eq 74 ]
}

@test "export socket (bound in sockcheck)" {
	check_export socket sockcheck
}

@test "export socketpair (bound in sockcheck)" {
	check_export socketpair sockcheck
}

@test "export bind (bound in sockcheck)" {
	check_export bind sockcheck
}

@test "export listen (bound in sockcheck)" {
	check_export listen sockcheck
}

@test "export accept (bound in sockcheck)" {
	check_export accept sockcheck
}

@test "export accept4 (bound in sockcheck)" {
	check_export accept4 sockcheck
}

@test "export connect (bound in sockcheck)" {
	check_export connect sockcheck
}

@test "export close (bound in sockcheck)" {
	check_export close sockcheck
}

@test "export close_range (bound in sockcheck)" {
	check_export close_range sockcheck
}

@test "export closefrom (bound in sockcheck)" {
	check_export closefrom sockcheck
}

@test "export shutdown (bound in sockcheck)" {
	check_export shutdown sockcheck
}

@test "export read (bound in sockcheck)" {
	check_export read sockcheck
}

@test "export readv (bound in sockcheck)" {
	check_export readv sockcheck
}

@test "export write (bound in sockcheck)" {
	check_export write sockcheck
}

@test "export writev (bound in sockcheck)" {
	check_export writev sockcheck
}

@test "export send (bound in sockcheck)" {
	check_export send sockcheck
}

@test "export sendto (bound in sockcheck)" {
	check_export sendto sockcheck
}

@test "export sendmsg (bound in sockcheck)" {
	check_export sendmsg sockcheck
}

@test "export sendmmsg (bound in sockcheck)" {
	check_export sendmmsg sockcheck
}

@test "export recv (bound in sockcheck)" {
	check_export recv sockcheck
}

@test "export recvfrom (bound in sockcheck)" {
	check_export recvfrom sockcheck
}

@test "export recvmsg (bound in sockcheck)" {
	check_export recvmsg sockcheck
}

@test "export recvmmsg (bound in sockcheck)" {
	check_export recvmmsg sockcheck
}

@test "export poll (bound in sockcheck)" {
	check_export poll sockcheck
}

@test "export ppoll (bound in sockcheck)" {
	check_export ppoll sockcheck
}

@test "export select (bound in sockcheck)" {
	check_export select sockcheck
}

@test "export pselect (bound in sockcheck)" {
	check_export pselect sockcheck
}

@test "export epoll_create (bound in sockcheck)" {
	check_export epoll_create sockcheck
}

@test "export epoll_create1 (bound in sockcheck)" {
	check_export epoll_create1 sockcheck
}

@test "export epoll_ctl (bound in sockcheck)" {
	check_export epoll_ctl sockcheck
}

@test "export epoll_wait (bound in sockcheck)" {
	check_export epoll_wait sockcheck
}

@test "export epoll_pwait (bound in sockcheck)" {
	check_export epoll_pwait sockcheck
}

@test "export epoll_pwait2 (bound in sockcheck)" {
	check_export epoll_pwait2 sockcheck
}

@test "export fcntl (bound in sockcheck)" {
	check_export fcntl sockcheck
}

@test "export fcntl64 (bound in sockcheck)" {
	check_export fcntl64 sockcheck
}

@test "export ioctl (bound in sockcheck)" {
	check_export ioctl sockcheck
}

@test "export getsockopt (bound in sockcheck)" {
	check_export getsockopt sockcheck
}

@test "export setsockopt (bound in sockcheck)" {
	check_export setsockopt sockcheck
}

@test "export getsockname (bound in sockcheck)" {
	check_export getsockname sockcheck
}

@test "export getpeername (bound in sockcheck)" {
	check_export getpeername sockcheck
}

@test "export dup (bound in sockcheck)" {
	check_export dup sockcheck
}

@test "export dup2 (bound in sockcheck)" {
	check_export dup2 sockcheck
}

@test "export dup3 (bound in sockcheck)" {
	check_export dup3 sockcheck
}

@test "export fdopen (bound in sockcheck)" {
	check_export fdopen sockcheck
}

@test "export fclose (bound in sockcheck)" {
	check_export fclose sockcheck
}

@test "export fork (bound in sockcheck)" {
	check_export fork sockcheck
}

@test "export vfork (bound in sockcheck)" {
	check_export vfork sockcheck
}

@test "export execve (bound in sockcheck)" {
	check_export execve sockcheck
}

@test "export execv (bound in sockcheck)" {
	check_export execv sockcheck
}

@test "export execvp (bound in sockcheck)" {
	check_export execvp sockcheck
}

@test "export execvpe (bound in sockcheck)" {
	check_export execvpe sockcheck
}

@test "export execl (bound in sockcheck)" {
	check_export execl sockcheck
}

@test "export execlp (bound in sockcheck)" {
	check_export execlp sockcheck
}

@test "export execle (bound in sockcheck)" {
	check_export execle sockcheck
}

@test "export fexecve (bound in sockcheck)" {
	check_export fexecve sockcheck
}

@test "export posix_spawn (bound in sockcheck)" {
	check_export posix_spawn sockcheck
}

@test "export posix_spawnp (bound in sockcheck)" {
	check_export posix_spawnp sockcheck
}

@test "export system (bound in sockcheck)" {
	check_export system sockcheck
}

@test "export popen (bound in sockcheck)" {
	check_export popen sockcheck
}

@test "export sendfile (bound in sockcheck)" {
	check_export sendfile sockcheck
}

@test "export sendfile64 (bound in sockcheck)" {
	check_export sendfile64 sockcheck
}

@test "export splice (bound in sockcheck)" {
	check_export splice sockcheck
}

@test "export setrlimit (bound in sockcheck)" {
	check_export setrlimit sockcheck
}

@test "export setrlimit64 (bound in sockcheck)" {
	check_export setrlimit64 sockcheck
}

@test "export prlimit (bound in sockcheck)" {
	check_export prlimit sockcheck
}

@test "export prlimit64 (bound in sockcheck)" {
	check_export prlimit64 sockcheck
}

@test "export __read_chk (bound in fortify)" {
	check_export __read_chk fortify
}

@test "export __recv_chk (bound in fortify)" {
	check_export __recv_chk fortify
}

@test "export __recvfrom_chk (bound in fortify)" {
	check_export __recvfrom_chk fortify
}

@test "export __poll_chk (bound in fortify)" {
	check_export __poll_chk fortify
}

@test "export __ppoll_chk (bound in fortify)" {
	check_export __ppoll_chk fortify
}

@test "export rsock_version (bound in api)" {
	check_export rsock_version api
}

@test "export rsock_fd_transport (bound in api)" {
	check_export rsock_fd_transport api
}

@test "export rsock_stats_get (bound in api)" {
	check_export rsock_stats_get api
}
