#!/usr/bin/env bash
# shm.sh - the same-host path against kernel TCP over loopback (issue 39's
# table): 64 B round trip (p50, p99) and a 64 KiB-write stream, each end
# pinned to its own CPU, kernel TCP and RSOCK_MODE=shm in one run.
# Usage: bench/shm.sh [BUILD_DIR]   (ROUNDS, STREAM_MB override the sizes)
# Prints a Markdown table and writes it to bench/results/shm.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-${RSOCK_BUILD_DIR:-$here/../build}}
lib=$build/.libs/librsock.so
[ -r "$lib" ] || { echo "shm.sh: no $lib (build first)" >&2; exit 2; }
rounds=${ROUNDS:-20000} mb=${STREAM_MB:-1024}
work=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
cc -O2 -pthread -I"$here/../include" -o "$work/sb" "$here/sockbench.c" -ldl
ncpu=$(nproc)
cs=0 cc_=$((ncpu > 1 ? 1 : 0))

port=47000
# run MODE KIND SIZE COUNT: one server (one connection) and one client
run() {
	local mode=$1 kind=$2 size=$3 count=$4 env=()
	port=$((port + 1))
	[ "$mode" = shm ] && env=(RSOCK_MODE=shm LD_PRELOAD="$lib")
	env "${env[@]}" taskset -c $cs "$work/sb" server 127.0.0.1 $port 1 &
	local srv=$!
	for _ in $(seq 1 100); do
		ss -ltn "sport = :$port" | grep -q LISTEN && break
		sleep 0.02
	done
	env "${env[@]}" taskset -c $cc_ "$work/sb" "$kind" 127.0.0.1 $port 127.0.0.1 "$size" "$count"
	wait $srv
}

tcp_pp=$(run tcp pingpong 64 "$rounds")
shm_pp=$(run shm pingpong 64 "$rounds")
tcp_st=$(run tcp stream 65536 $((mb << 20)))
shm_st=$(run shm stream 65536 $((mb << 20)))
read -r tp50 tp99 _ <<<"$tcp_pp"
read -r sp50 sp99 _ <<<"$shm_pp"
tmb=$(awk '{print $1}' <<<"$tcp_st")
smb=$(awk '{print $1}' <<<"$shm_st")
mkdir -p "$here/results"
{
	echo "# The same-host path against kernel TCP over loopback"
	echo
	echo "\`bench/shm.sh\` (sockbench's ping-pong and stream, RSOCK_MODE=shm at both ends),"
	echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $ncpu CPUs."
	echo
	echo "| measure (loopback, CPUs $cs and $cc_ of $ncpu) | kernel TCP | same-host path | ratio |"
	echo "|---|---:|---:|---:|"
	echo "| 64 B round trip p50 (us) | $tp50 | $sp50 | $(awk -v a="$sp50" -v b="$tp50" 'BEGIN{printf "%.2fx", a/b}') |"
	echo "| 64 B round trip p99 (us) | $tp99 | $sp99 | $(awk -v a="$sp99" -v b="$tp99" 'BEGIN{printf "%.2fx", a/b}') |"
	echo "| 64 KiB writes, $mb MiB (MB/s) | $tmb | $smb | $(awk -v a="$smb" -v b="$tmb" 'BEGIN{printf "%.2fx", a/b}') |"
} | tee "$here/results/shm.md"
