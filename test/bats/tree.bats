#!/usr/bin/env bats
# The tree as a reference: the dependency rule of src/ holds, design.md's
# module map names the directories src/ has, and the product's text does
# not narrate its own development (history lives in git log and
# bench/results/changes.md).

load helpers

# The files of the tree (git's list in a checkout, else every file).
tree_files() {
	if git -C "$RSOCK_SRC_DIR" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git -C "$RSOCK_SRC_DIR" ls-files
	else
		(cd "$RSOCK_SRC_DIR" && find . -type f ! -path './build*' | sed 's|^\./||')
	fi
}

@test "layers: no file of src/ includes a header of a layer above its own, and no directories include each other" {
	require_cmd python3
	run python3 "$RSOCK_SRC_DIR/test/layers/check.py" "$RSOCK_SRC_DIR/src"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "layers: the check fails on an upward include" {
	require_cmd python3
	local d=$BATS_TEST_TMPDIR/src
	mkdir -p "$d/base" "$d/core"
	printf '#include "core/conn.h"\n' >"$d/base/x.c"
	printf '#include "base/log.h"\n' >"$d/core/conn.h"
	run python3 "$RSOCK_SRC_DIR/test/layers/check.py" "$d"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *'base/x.c: includes "core/conn.h": base is below core'* ]]
}

@test "design.md: its module map names every directory of src/, and only those" {
	local map have
	# the map: src/... paths at the start of a line of design.md's
	# "Module map" section
	map=$(awk '/^## [0-9]+\. Module map/ { on = 1; next } /^## / { on = 0 } on' "$RSOCK_SRC_DIR/doc/design.md" |
		grep -oE '^src/[a-z/]+/' | sed 's|/$||' | sort -u)
	have=$(cd "$RSOCK_SRC_DIR" && find src -mindepth 1 -type d | sort -u)
	echo "map: $map"
	echo "tree: $have"
	[ -n "$map" ]
	[ "$map" = "$have" ]
}

@test "the product's text does not narrate its own development (history is in git log and bench/results/changes.md)" {
	local word='sess''ion' hits
	hits=$(cd "$RSOCK_SRC_DIR" && tree_files | grep -vE '^bench/results/changes\.md$' |
		while read -r f; do [ -f "$f" ] && grep -IliwE "${word}s?" "$f" 2>/dev/null; done || true)
	echo "files naming it: $hits"
	[ -z "$hits" ]
}

@test "design.md: every citation of it in the tree names one of its sections by title" {
	require_cmd python3
	run python3 - "$RSOCK_SRC_DIR" <<'PY'
import os, re, subprocess, sys
top = sys.argv[1]
titles = set(re.findall(r'^## [0-9]+\. (.+)$', open(os.path.join(top, 'doc/design.md')).read(), re.M))
try:
    files = subprocess.run(['git', '-C', top, 'ls-files'], capture_output=True, text=True, check=True).stdout.split()
except Exception:
    files = [os.path.relpath(os.path.join(r, n), top) for r, _, ns in os.walk(top) for n in ns]
bad = 0
for f in files:
    if not f.endswith(('.c', '.h', '.bats', '.bash', '.sh', '.py', '.js', '.erl', '.7', '.1', '.md', '.am', '.ac')):
        continue
    if f in ('doc/design.md', 'bench/results/changes.md', 'test/bats/tree.bats'):
        continue
    p = os.path.join(top, f)
    if not os.path.isfile(p):
        continue
    text = open(p, errors='replace').read()
    # join comment continuation lines (" * ", "# ", "// ") into one line
    flat = re.sub(r'\n[ \t]*(\*|#|//|;+|%+)?[ \t]*', ' ', text)
    for m in re.finditer(r'design\.md(?:\'s)?,?\s+(sections?\s+[0-9]+|§\s*[0-9]+|"([^"]+)")', flat):
        if m.group(2) is None or m.group(2) not in titles:
            print(f'{f}: cites {m.group(1)!r}, not a title of doc/design.md')
            bad += 1
print(f'{len(titles)} sections; {bad} bad citations')
sys.exit(1 if bad else 0)
PY
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "the scripts outside the suite parse (scripts/*.sh, test/vm's commands)" {
	local f
	for f in "$RSOCK_SRC_DIR"/scripts/*.sh "$RSOCK_SRC_DIR"/test/vm/{soak,peer,vm-pair,vm-run,vm-shell}; do
		bash -n "$f" || { echo "$f does not parse" >&2; return 1; }
	done
}
