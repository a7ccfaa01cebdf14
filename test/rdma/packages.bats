#!/usr/bin/env bats
# packages.bats - the Debian packages (debian/) installed and used: librsock0
# alone makes LD_PRELOAD=librsock.so work, and the installed rsock-run
# carries an unmodified program's stream between the two RDMA addresses over
# RDMA with the installed library (not the build tree's), and the installed
# rsock-stat shows that stream live from outside.
#
# The packages are the .debs scripts/test.sh's step "Debian packages" leaves
# in RSOCK_DEB_DIR (test-results/deb). In the soft-RoCE guest `dpkg -i`
# writes only to the guest's tmpfs overlay (test/vm/README.md, "Guest
# environment"): the host's system is not changed. On a host with an RDMA
# device the test never installs anything: the packages must already be
# installed there, at the version of the .debs.

load ../bats/helpers
load rsock

setup_file() {
	require_rdma_env
}

setup() {
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	stop_all_bg
}

# deb_of PACKAGE: the path of PACKAGE's .deb in RSOCK_DEB_DIR.
deb_of() {
	local f
	f=$(ls "$RSOCK_DEB_DIR/$1"_*.deb 2>/dev/null | head -n 1)
	[ -n "$f" ] || {
		echo "no $1_*.deb in $RSOCK_DEB_DIR: build the packages (scripts/test.sh, step \"Debian packages\")" >&2
		return 1
	}
	printf '%s\n' "$f"
}

# install_debs PACKAGE...: PACKAGEs from RSOCK_DEB_DIR are installed (in the
# guest with dpkg -i; on an RDMA host they must be installed already).
install_debs() {
	local p f v have
	if [ -z "${RSOCK_DEB_DIR:-}" ] || [ ! -d "$RSOCK_DEB_DIR" ]; then
		echo "RSOCK_DEB_DIR (${RSOCK_DEB_DIR:-unset}) is not a directory of .debs: build the packages" \
			"(scripts/test.sh, step \"Debian packages\", leaves them in test-results/deb) and set RSOCK_DEB_DIR" >&2
		return 1
	fi
	for p in "$@"; do
		f=$(deb_of "$p") || return 1
		v=$(dpkg-deb -f "$f" Version)
		have=$(dpkg-query -W -f='${Status} ${Version}' "$p" 2>/dev/null || true)
		[ "$have" = "install ok installed $v" ] && continue
		if [ "${RSOCK_IN_VM:-0}" != 1 ]; then
			echo "$p $v is not installed on this RDMA host (found: ${have:-nothing}); the test installs" \
				"packages only in the soft-RoCE guest: dpkg -i $f, or run it through test/rdma/run-suite in the guest" >&2
			return 1
		fi
		# the guest's overlay: man-db's trigger would index every manual page over 9p
		rm -f /var/lib/man-db/auto-update
		dpkg -i "$f" >dpkg.log 2>&1 || {
			cat dpkg.log >&2
			return 1
		}
	done
}

# installed_lib: the preload name librsock0 installs, /usr/lib/<triplet>/librsock.so.
installed_lib() {
	local l
	l=$(dpkg -L librsock0 | grep -E '^/usr/lib/[^/]+-linux-[^/]+/librsock\.so$')
	[ -n "$l" ] || {
		echo "librsock0 has no /usr/lib/<triplet>/librsock.so:" >&2
		dpkg -L librsock0 >&2
		return 1
	}
	printf '%s\n' "$l"
}

# maps_lib PID: the librsock.so file mapped into PID (one path; not the
# library's /dev/shm table, librsock-tuples).
maps_lib() {
	awk '$6 ~ /\/librsock\.so/ { print $6 }' "/proc/$1/maps" | sort -u
}

@test "packages: librsock0 alone, LD_PRELOAD=librsock.so loads /usr/lib/<triplet>/librsock.so" {
	if [ "${RSOCK_IN_VM:-0}" = 1 ] && dpkg-query -W -f='${Status}' rsock-tools 2>/dev/null | grep -q ' installed'; then
		dpkg -r rsock-tools >/dev/null
	fi
	install_debs librsock0
	local lib real mapped
	lib=$(installed_lib)
	real=$(readlink -f "$lib")
	echo "# librsock0 $(dpkg-query -W -f='${Version}' librsock0): $lib -> ${real##*/}" >&3
	# dpkg's ldconfig trigger ran: the cache has the name (under /lib/<triplet>
	# when /lib is the merged /usr/lib: the same file)
	local cached
	cached=$(ldconfig -p | awk '$1 == "librsock.so" { print $NF }' | head -n 1)
	[ -n "$cached" ] && [ "$(readlink -f "$cached")" = "$real" ] || {
		echo "ldconfig's cache has librsock.so as '${cached:-nothing}', not $lib:" >&2
		ldconfig -p | grep librsock >&2
		false
	}
	# the bare name, as librsock(7) says; the loader finds the installed file
	mapped=$(env -u RSOCK_LIB LD_PRELOAD=librsock.so RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/bare.log" \
		sh -c 'awk '\''$6 ~ /\/librsock\.so/ { print $6 }'\'' /proc/$$/maps | sort -u')
	[ "$mapped" = "$real" ] || {
		echo "LD_PRELOAD=librsock.so mapped '$mapped', not $real" >&2
		false
	}
	stats_line bare.log
}

@test "packages: the installed rsock-run carries nc between A and B over RDMA with the installed library" {
	require_cmd nc
	install_debs librsock0 rsock-tools
	local lib real run port n=1048576 pid
	lib=$(installed_lib)
	real=$(readlink -f "$lib")
	run=$(command -v rsock-run)
	[ "$run" = /usr/bin/rsock-run ] || {
		echo "rsock-run is $run, not the installed /usr/bin/rsock-run" >&2
		false
	}
	# the library rsock-run preloads by default, with no RSOCK_LIB to steer it
	grep -qF "$lib" "$run"
	rand_file data "$n"
	port=$(free_port)
	rdma_snapshot
	# nc's output is srv.out (start_bg)
	start_bg srv env -u RSOCK_LIB -u LD_PRELOAD rsock-run -s -L "$PWD/srv.log" -- \
		nc -n -l -s "$ADDR_B" -p "$port"
	wait_for_port "$port" 15 "$BG_PID"
	# the server (nc, exec'd by rsock-run under timeout) maps the installed file
	pid=$(pgrep -P "$BG_PID" -x nc | head -n 1)
	[ -n "$pid" ] || {
		echo "no nc child of $BG_PID" >&2
		false
	}
	[ "$(maps_lib "$pid")" = "$real" ] || {
		echo "nc (pid $pid) maps '$(maps_lib "$pid")', not $real" >&2
		false
	}
	bounded 120 env -u RSOCK_LIB -u LD_PRELOAD rsock-run -s -L "$PWD/cli.log" -- \
		nc -N -s "$ADDR_A" "$ADDR_B" "$port" <data
	wait_bg "$BG_PID" 60
	same_file data srv.out "nc $ADDR_A -> $ADDR_B through the installed rsock-run"
	stats_only_rdma cli.log
	stats_only_rdma srv.log
	stats_rdma cli.log "$n" tx
	stats_rdma srv.log "$n" rx
	rdma_crossed 20
}

@test "packages: the installed rsock-stat shows the stream of a program run by the installed rsock-run on RDMA" {
	require_cmd python3
	install_debs librsock0 rsock-tools
	local pair=$RSOCK_SRC_DIR/test/bats/statpair.py stat i cli srv
	stat=$(command -v rsock-stat)
	[ "$stat" = /usr/bin/rsock-stat ] || {
		echo "rsock-stat is '$stat', not the installed /usr/bin/rsock-stat" >&2
		false
	}
	man -w rsock-stat | grep -q '^/usr/share/man/man1/rsock-stat\.1'
	export STATPAIR_SERVER=$ADDR_B STATPAIR_CLIENT=$ADDR_A
	start_bg srv env -u RSOCK_LIB -u LD_PRELOAD rsock-run -s -L "$PWD/srv.log" -- \
		python3 "$pair" server . srv 100000 50000
	for i in $(seq 300); do [ -s srv.port ] && break; sleep 0.1; done
	start_bg cli env -u RSOCK_LIB -u LD_PRELOAD rsock-run -s -L "$PWD/cli.log" -- \
		python3 "$pair" client . cli "$(cat srv.port)" 100000 50000
	for i in $(seq 600); do [ -s srv.ready ] && [ -s cli.ready ] && break; sleep 0.1; done
	cli=$(cat cli.ready)
	srv=$(cat srv.ready)
	run "$stat" -p "$cli"
	echo "$output"
	[ "$status" -eq 0 ]
	grep -E " rdma " <<<"$output" | sed 's/^/# /' >&3
	[[ "$output" =~ \ rdma\ +established\ +100000\ +50000\ dev=[a-z][^\ ]*\ qpn=[1-9][0-9]* ]]
	run "$stat" -p "$srv"
	[ "$status" -eq 0 ]
	[[ "$output" =~ \ rdma\ +established\ +50000\ +100000\ dev= ]]
	run "$stat" --prometheus
	[ "$status" -eq 0 ]
	grep -E "^rsock_bytes_total\{path=\"rdma\",direction=\"tx\",pid=\"$cli\",comm=\"[^\"]+\"\} 100000$" <<<"$output"
	touch stop
	wait_bg "$BG_PID" 60
	stop_all_bg
	stats_only_rdma cli.log
	stats_only_rdma srv.log
}
