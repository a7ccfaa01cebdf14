# common.sh - what the benchmark scripts share (sourced by bench/*.sh).
# shellcheck shell=bash

# wait_port PORT SECONDS: wait until something listens on TCP port PORT (on
# any address), at most SECONDS; status 1 on time-out.
wait_port() {
	local i
	for ((i = 0; i < $2 * 20; i++)); do
		ss -ltn 2>/dev/null | grep -q ":$1 " && return 0
		sleep 0.05
	done
	return 1
}

# median_first: the median of the first fields of the lines on stdin
# ("failed" for none).
median_first() { sort -g | awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : "failed") }'; }

# ratio_x A B: A / B as "1.23x", "-" unless both are positive numbers.
ratio_x() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }
