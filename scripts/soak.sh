#!/usr/bin/env bash
# soak.sh - librsock under mixed traffic and random faults for a given time,
# on two soft-RoCE guests joined by a wire (test/vm/vm-pair), then a report:
# bytes verified, faults injected, failovers, the paths streams took and the
# errors seen (test/vm/soak says what runs). Not part of the test suite.
# Usage: scripts/soak.sh [--time SECONDS] [--seed N] [--report FILE]
#   --time    how long the traffic runs (default 300)
#   --seed    the faults' and the traffic's random seed (default: random)
#   --report  where the report goes (default test-results/soak-SEED.txt);
#             the progress and each failure's logs go beside it (.log)
# Exit status 0 when every stream and churn run was intact.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
secs=300 seed=$((RANDOM % 10000)) report=
while [ $# -gt 0 ]; do
	case "$1" in
	--time) secs=$2; shift 2 ;;
	--seed) seed=$2; shift 2 ;;
	--report) report=$2; shift 2 ;;
	*) sed -n '6,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
report=${report:-test-results/soak-$seed.txt}
mkdir -p "$(dirname "$report")" test-results
scripts/setup.sh
rc=0
RSOCK_VM_TIMEOUT=$((secs + 900)) test/vm/vm-pair -- test/vm/soak "$secs" "$seed" \
	>"$report" 2> >(tee "${report%.txt}.log" | grep --line-buffered '^soak: ' >&2) || rc=$?
cat "$report"
exit $rc
