#!/usr/bin/env bash
# setup.sh - install what librsock needs (Debian 12, as root) and build it.
# Usage: scripts/setup.sh [--san asan|tsan] [--no-deps]
#   default      build/        -Werror
#   --san asan   build-asan/   AddressSanitizer + UndefinedBehaviorSanitizer
#   --san tsan   build-tsan/   ThreadSanitizer
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
san="" deps=1
while [ $# -gt 0 ]; do
	case "$1" in
	--san) san=$2; shift 2 ;;
	--no-deps) deps=0; shift ;;
	*) echo "setup.sh: unknown option $1" >&2; exit 2 ;;
	esac
done

BUILD_PKGS="build-essential autoconf automake libtool pkg-config librdmacm-dev libibverbs-dev uthash-dev libcmocka-dev"
TEST_PKGS="bats curl python3 netcat-openbsd iperf3 iperf redis-server redis-tools nginx-light valgrind procps iproute2 memcached libmemcached-tools wrk postgresql rsync socat openssh-server openssh-client ncat haproxy lighttpd mosquitto mosquitto-clients openssl varnish mariadb-server mariadb-client nghttp2-server nghttp2-client stunnel4 tinyproxy gunicorn unbound bind9-dnsutils ruby nuttcp apache2 apache2-utils qperf nodejs sockperf erlang-base python3-zmq default-jdk-headless"
# the Debian packages (debian/, scripts/test.sh's step "Debian packages"); git: git archive
DEB_PKGS="debhelper dpkg-dev lintian git"
VM_PKGS="qemu-system-x86 busybox-static cpio kmod rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest iproute2 util-linux"

apt_install() { # install the packages that are missing, updating the lists once
	local missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "setup: installing ${missing[*]}" >&2
	if [ "$(id -u)" != 0 ]; then
		echo "setup: run as root to install packages" >&2
		return 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

if [ "$deps" = 1 ]; then
	apt_install $BUILD_PKGS $TEST_PKGS $DEB_PKGS $VM_PKGS
fi

cd "$top"
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
	./autogen.sh >/dev/null 2>&1 || ./autogen.sh
fi
case "$san" in
"") dir=build; flags=(--enable-werror) ;;
asan) dir=build-asan; flags=(--enable-asan --enable-ubsan) ;;
tsan) dir=build-tsan; flags=(--enable-tsan) ;;
*) echo "setup.sh: --san asan|tsan" >&2; exit 2 ;;
esac
mkdir -p "$dir"
cd "$dir"
if [ ! -f Makefile ] || [ ../configure -nt Makefile ]; then
	../configure -q "${flags[@]}" CFLAGS="-O2 -g"
fi
make -s -j"$(nproc)" >/dev/null
make -s -j"$(nproc)" progs >/dev/null
echo "setup: built $top/$dir" >&2
