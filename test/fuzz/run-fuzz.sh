#!/bin/sh
# run-fuzz.sh [SECONDS] - fuzz the wire decoders and the rings with libFuzzer.
#
# Builds test/fuzz/fuzz_proto.c with src/base/proto.c and src/base/ring.c using
# clang -fsanitize=fuzzer,address,undefined, writes a seed corpus (the target's
# built-in one, via a plain build of the same file), and fuzzes for SECONDS
# (default 20). Exits non-zero when the target crashes or an invariant fails;
# the crashing input is kept in the work directory and can be replayed with
#   $WORK/fuzz_proto_plain $WORK/crash-...
# Environment: CLANG (default clang), FUZZ_WORK (work directory, kept; default
# a new temporary one, removed after a clean run), FUZZ_ARGS (extra libFuzzer
# options, e.g. -use_value_profile=1 or -jobs=4).
set -eu

secs=${1:-20}
case $secs in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
top=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CLANG:-clang}
if [ -n "${FUZZ_WORK:-}" ]; then
	work=$FUZZ_WORK keep=1
else
	work=$(mktemp -d "${TMPDIR:-/tmp}/rsock-fuzz.XXXXXX") keep=0
fi
mkdir -p "$work/corpus"

srcs="$top/test/fuzz/fuzz_proto.c $top/src/base/proto.c $top/src/base/ring.c"
flags="-std=gnu11 -g -O1 -fno-omit-frame-pointer -I$top/include -I$top/src -Wall -Wextra -Wno-unused-parameter"

# shellcheck disable=SC2086
"$cc" $flags -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	$srcs -o "$work/fuzz_proto"
# shellcheck disable=SC2086
"$cc" $flags -DFUZZ_STANDALONE -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	$srcs -o "$work/fuzz_proto_plain"

"$work/fuzz_proto_plain" --write-corpus "$work/corpus"
"$work/fuzz_proto_plain" # the built-in regression pass first

cat >"$work/proto.dict" <<'DICT'
magic="RSK1"
probe="RSK1\x01\x00"
beacon="RSK1\x02\x00"
hello="RSK1\x03\x00\x2c\x00\x01\x00"
hello_ack="RSK1\x04\x00\x2c\x00\x01\x00"
len_max="\x00\x01"
ring_min="\x00\x10\x00\x00"
ring_max="\x00\x00\x00\x40"
inline_max="\x00\x10\x00\x00"
inline_over="\x01\x10\x00\x00"
DICT

echo "fuzzing for ${secs}s in $work"
status=0
# shellcheck disable=SC2086
ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
"$work/fuzz_proto" -max_total_time="$secs" -max_len=512 -print_final_stats=1 \
	-dict="$work/proto.dict" -artifact_prefix="$work/" ${FUZZ_ARGS:-} \
	"$work/corpus" >"$work/fuzz.log" 2>&1 || status=$?
grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added|stat::peak_rss_mb)|#[0-9]+[[:space:]]+DONE|ERROR|SUMMARY' "$work/fuzz.log" || true
if [ $status -ne 0 ]; then
	tail -n 40 "$work/fuzz.log" >&2
	echo "fuzz_proto: FAILED (status $status); inputs:" >&2
	find "$work" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) >&2
	exit 1
fi
if [ $keep = 1 ]; then
	echo "fuzz_proto: ok (log: $work/fuzz.log)"
else
	rm -rf "$work"
	echo "fuzz_proto: ok"
fi
