#!/usr/bin/env bash
# passthrough.sh - extra user-space instructions per intercepted call on a
# descriptor librsock does not track, counted with callgrind (repeatable,
# independent of machine load). Usage: bench/passthrough.sh [BUILD_DIR]
# Prints a Markdown table and writes it to bench/results/passthrough.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-${RSOCK_BUILD_DIR:-$here/../build}}
lib=$build/.libs/librsock.so
[ -r "$lib" ] || { echo "passthrough.sh: no $lib (build first)" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "passthrough.sh: valgrind needed" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/pt" "$here/passthrough.c"
n1=1000 n2=21000

count() { # preload(0|1) call n -> total instructions of the program
	local out=$work/cg.$1.$2.$3
	if [ "$1" = 1 ]; then
		LD_PRELOAD=$lib valgrind --tool=callgrind --callgrind-out-file="$out" "$work/pt" "$2" "$3" 2>/dev/null
	else
		valgrind --tool=callgrind --callgrind-out-file="$out" "$work/pt" "$2" "$3" 2>/dev/null
	fi
	awk '/^summary:/ {print $2}' "$out"
}

mkdir -p "$here/results"
{
	echo "| call (untracked fd) | instructions/call without | with librsock | extra |"
	echo "|---|---:|---:|---:|"
	for call in read write recv getsockopt fcntl poll; do
		a1=$(count 0 $call $n1); a2=$(count 0 $call $n2)
		b1=$(count 1 $call $n1); b2=$(count 1 $call $n2)
		plain=$(( (a2 - a1) / (n2 - n1) )); pre=$(( (b2 - b1) / (n2 - n1) ))
		echo "| $call | $plain | $pre | $((pre - plain)) |"
	done
} | tee "$here/results/passthrough.md"
