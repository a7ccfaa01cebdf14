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
