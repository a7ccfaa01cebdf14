#!/usr/bin/env bats
# rsock-stat against running preloaded programs (over the same-host path, and
# over kernel TCP with RSOCK_SHM=0): the streams,
# their paths, exact bytes, fallback reasons, the per-process counters against
# the programs' own RSOCK_STATS=1 line, JSON, Prometheus, -p, a process killed
# mid-stream, a fork child, an exec, and segments that lie.

load helpers

STAT=$RSOCK_BUILD_DIR/tools/rsock-stat
PAIR=$BATS_TEST_DIRNAME/statpair.py

setup_file() {
	require_build
	require_cmd python3
	if [ ! -x "$STAT" ]; then
		echo "missing $STAT: run make" >&2
		return 1
	fi
}

setup() {
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	touch "$BATS_TEST_TMPDIR/stop"
	stop_all_bg
	rm -f "/dev/shm/rsock-$$" "/dev/shm/rsock-$BASHPID"
}

# wait_file FILE: wait (10 s) until FILE exists.
wait_file() {
	local i
	for ((i = 0; i < 200; i++)); do
		[ -s "$1" ] && return 0
		sleep 0.05
	done
	echo "wait_file: $1 never appeared" >&2
	ls -la "$BATS_TEST_TMPDIR" >&2
	for f in "$BATS_TEST_TMPDIR"/*.err; do
		[ -s "$f" ] && tail -n 5 "$f" >&2
	done
	return 1
}

# pair NAME CLIENT_SENDS SERVER_SENDS [client extra args]: a preloaded server
# and client with that transfer done, both holding the stream; sets SRV and CLI
# (their pids) and PORT.
pair() {
	local name=$1 up=$2 down=$3
	shift 3
	start_bg "$name-srv" with_preload python3 "$PAIR" server . "$name-srv" "$up" "$down"
	wait_file "$name-srv.port"
	PORT=$(cat "$name-srv.port")
	start_bg "$name-cli" with_preload python3 "$PAIR" client . "$name-cli" "$PORT" "$up" "$down" "$@"
	wait_file "$name-srv.ready"
	wait_file "$name-cli.ready"
	SRV=$(cat "$name-srv.ready")
	CLI=$(cat "$name-cli.ready")
}

@test "rsock-stat: two preloaded programs of this host: one line per stream, path shm, exact bytes" {
	pair a 100000 54321
	run "$STAT"
	[ "$status" -eq 0 ]
	echo "$output"
	[[ "${lines[0]}" == PID* ]]
	line=$(grep -E "^$CLI +python3 " <<<"$output")
	[[ "$line" =~ 127\.0\.0\.1:[0-9]+\ +127\.0\.0\.1:$PORT\  ]]
	[[ "$line" =~ \ shm\ +established\ +100000\ +54321$ ]]
	line=$(grep -E "^$SRV +python3 " <<<"$output")
	[[ "$line" =~ 127\.0\.0\.1:$PORT\  ]]
	[[ "$line" =~ \ shm\ +established\ +54321\ +100000$ ]]
}

@test "rsock-stat: two preloaded programs on TCP (RSOCK_SHM=0): exact bytes, fallback no_device" {
	export RSOCK_SHM=0
	pair t 100000 54321
	run "$STAT"
	[ "$status" -eq 0 ]
	echo "$output"
	line=$(grep -E "^$CLI +python3 " <<<"$output")
	[[ "$line" =~ \ tcp\ +established\ +100000\ +54321\ fallback=no_device$ ]]
	line=$(grep -E "^$SRV +python3 " <<<"$output")
	[[ "$line" =~ \ tcp\ +established\ +54321\ +100000\ fallback=no_device$ ]]
}

@test "rsock-stat: RSOCK_MODE=tcp: the fallback reason is rules" {
	export RSOCK_MODE=tcp
	pair m 1000 2000
	run "$STAT" -p "$CLI"
	[ "$status" -eq 0 ]
	echo "$output"
	[[ "${lines[1]}" =~ \ tcp\ +established\ +1000\ +2000\ fallback=rules$ ]]
	[ "${#lines[@]}" -eq 2 ]
}

@test "rsock-stat -j: one JSON object per stream with the documented fields" {
	pair j 70000 1234
	run "$STAT" -j
	[ "$status" -eq 0 ]
	echo "$output" >out.json
	python3 - "$CLI" "$SRV" "$PORT" <<'EOF'
import json, sys
cli, srv, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
objs = [json.loads(l) for l in open("out.json") if l.strip()]
assert all(o["type"] == "stream" for o in objs), objs
c = [o for o in objs if o["pid"] == cli]
s = [o for o in objs if o["pid"] == srv]
assert len(c) == 1 and len(s) == 1, objs
c, s = c[0], s[0]
for o in (c, s):
    for k in ("comm", "fd", "role", "local_addr", "local_port", "peer_addr", "peer_port",
              "path", "state", "tx_bytes", "rx_bytes", "since", "fallback"):
        assert k in o, (k, o)
    assert o["path"] == "shm" and o["state"] == "established" and o["fallback"] is None, o
    assert "device" not in o, o
assert c["role"] == "client" and s["role"] == "accepted", (c, s)
assert c["tx_bytes"] == 70000 and c["rx_bytes"] == 1234, c
assert s["tx_bytes"] == 1234 and s["rx_bytes"] == 70000, s
assert c["peer_port"] == port and s["local_port"] == port, (c, s)
assert c["local_port"] == s["peer_port"], (c, s)
assert c["peer_addr"] == "127.0.0.1", c
EOF
}

@test "rsock-stat -s: the counters equal the programs' own RSOCK_STATS=1 lines at exit" {
	export RSOCK_STATS=1
	pair s 33333 4444
	run "$STAT" -s -j
	[ "$status" -eq 0 ]
	echo "$output" >stat.json
	touch stop
	wait_file s-cli.err
	# (the programs' own lines: python's helper processes print theirs too)
	for i in $(seq 1 100); do
		grep -q "^rsock\[$CLI:.*stats:" s-cli.err && grep -q "^rsock\[$SRV:.*stats:" s-srv.err && break
		sleep 0.05
	done
	python3 - "$CLI" "$SRV" <<'EOF'
import json, re, sys
objs = [json.loads(l) for l in open("stat.json") if l.strip()]
procs = {o["pid"]: o for o in objs if o["type"] == "process"}
tot = [o for o in objs if o["type"] == "totals"]
assert len(tot) == 1, objs
for pid, name in ((int(sys.argv[1]), "s-cli"), (int(sys.argv[2]), "s-srv")):
    line = [l for l in open(name + ".err") if "] info: stats:" in l and l.startswith("rsock[%d:" % pid)]
    assert line, open(name + ".err").read()
    lib = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", line[-1].split("stats:")[1]))
    nums = [int(v) for v in re.findall(r"=(\d+)", line[-1].split("stats:")[1])]
    p = procs[pid]
    mine = [p["streams_tcp"], p["streams_rdma"], p["streams_shm"], p["tx_bytes_tcp"],
            p["rx_bytes_tcp"], p["tx_bytes_rdma"], p["rx_bytes_rdma"], p["tx_bytes_shm"],
            p["rx_bytes_shm"]] + \
           [p["fallbacks"][k] for k in ("rules", "no_device", "peer", "resources", "protocol",
                                        "not_implemented")] + \
           [p["registered_bytes"], p["handovers"], p["cq_events"], p["cq_arms"], p["zcopy_bytes"],
            p["failovers"]]
    assert mine == nums, (name, mine, nums)
    assert p["streams"] == 1 and p["tracked_fds"] >= 1, p
assert procs[int(sys.argv[1])]["streams_shm"] == 1 and procs[int(sys.argv[1])]["tx_bytes_shm"] == 33333, procs
for k in ("streams_shm", "tx_bytes_shm", "rx_bytes_shm"):
    assert tot[0][k] >= sum(p[k] for p in procs.values() if p["pid"] in (int(sys.argv[1]), int(sys.argv[2]))), k
EOF
	run "$STAT" -s -p "$CLI"
	[ "$status" -eq 0 ]
}

@test "rsock-stat --prometheus: the text exposition format, line by line" {
	pair p 5000 6000
	run "$STAT" --prometheus
	[ "$status" -eq 0 ]
	echo "$output" >out.prom
	python3 - "$CLI" <<'EOF'
import re, sys
cli = sys.argv[1]
helped, typed, samples = set(), {}, {}
sample = re.compile(r'^([a-z_]+)(\{([a-z_]+="(?:[^"\\]|\\.)*"(?:,[a-z_]+="(?:[^"\\]|\\.)*")*)\})? (-?[0-9]+(?:\.[0-9]+)?)$')
for l in open("out.prom").read().splitlines():
    if l.startswith("# HELP "):
        helped.add(l.split()[2])
        continue
    if l.startswith("# TYPE "):
        _, _, name, t = l.split()
        assert t in ("gauge", "counter"), l
        typed[name] = t
        continue
    m = sample.match(l)
    assert m, "bad line: %r" % l
    name = m.group(1)
    assert name in helped and name in typed, "no HELP/TYPE before %r" % l
    labels = dict(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
    samples.setdefault(name, []).append((labels, float(m.group(4))))
assert all(n.endswith("_total") for n, t in typed.items() if t == "counter"), typed
def get(name, **want):
    r = [v for lab, v in samples[name] if all(lab.get(k) == w for k, w in want.items())]
    assert len(r) == 1, (name, want, samples.get(name))
    return r[0]
assert get("rsock_streams", path="shm") >= 2
assert get("rsock_bytes_total", path="shm", direction="tx", pid=cli) == 5000
assert get("rsock_bytes_total", path="shm", direction="rx", pid=cli) == 6000
assert get("rsock_bytes_total", path="tcp", direction="tx", pid=cli) == 0
assert get("rsock_bytes_total", path="shm", direction="tx", pid=cli, comm="python3") == 5000
assert get("rsock_streams_total", path="shm", pid=cli) == 1
assert get("rsock_streams_total", path="tcp", pid=cli) == 0
assert get("rsock_processes") >= 2
EOF
}

@test "rsock-stat -p PID: only that process; -i -c: samples with rates" {
	pair f 111 222
	run "$STAT" -p "$SRV"
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 2 ]
	[[ "${lines[1]}" == "$SRV "* ]]
	run "$STAT" -p 999999999
	[ "$status" -eq 2 ] || [ "${#lines[@]}" -le 1 ]
	run "$STAT" -j -p "$CLI" -i 0.2 -c 2
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 2 ]
	[[ "${lines[0]}" != *tx_rate* ]]
	[[ "${lines[1]}" == *'"tx_rate":0,"rx_rate":0'* ]]
	run "$STAT" -s -i 0.2 -c 2
	[ "$status" -eq 0 ]
	[[ "$output" == *"tx/s="* ]]
	run "$STAT" -x
	[ "$status" -eq 2 ]
}

@test "rsock-stat: a process killed with SIGKILL mid-stream: its segment is ignored and removed" {
	pair k 1000 1000
	[ -e "/dev/shm/rsock-$CLI" ]
	kill -KILL "$CLI"
	for i in $(seq 1 100); do
		kill -0 "$CLI" 2>/dev/null || break
		sleep 0.05
	done
	[ -e "/dev/shm/rsock-$CLI" ]
	run "$STAT"
	[ "$status" -eq 0 ]
	[ -z "$(grep -E "^$CLI " <<<"$output")" ]
	grep -qE "^$SRV " <<<"$output"
	[ ! -e "/dev/shm/rsock-$CLI" ]
	[ -e "/dev/shm/rsock-$SRV" ]
}

@test "rsock-stat: a segment whose pid is another process's now is ignored and removed" {
	pair r 10 10
	# the client's segment under this shell's pid (alive, not librsock),
	# made before the shell started: the pid is another process's now
	python3 - "/dev/shm/rsock-$CLI" "/dev/shm/rsock-$$" "$$" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read(1 << 20))
struct.pack_into("<I", b, 20, ((1 << 20) - 4096) // 256)  # nslots: what the copy holds
struct.pack_into("<i", b, 24, int(sys.argv[3]))
struct.pack_into("<Q", b, 32, 1)  # made 1 ns after boot
open(sys.argv[2], "wb").write(b)
EOF
	run "$STAT"
	[ "$status" -eq 0 ]
	[ -z "$(grep -E "^$$ " <<<"$output")" ]
	[ ! -e "/dev/shm/rsock-$$" ]
	# a file that is not a segment is never touched
	echo hello >"/dev/shm/rsock-$$"
	run "$STAT"
	[ "$status" -eq 0 ]
	[ "$(cat /dev/shm/rsock-$$)" = hello ]
}

@test "rsock-stat: corrupt and hostile segments never crash it" {
	pair h 10 10
	python3 - "/dev/shm/rsock-$CLI" "/dev/shm/rsock-$$" "$$" "$STAT" <<'EOF'
import random, struct, subprocess, sys, time
good = bytearray(open(sys.argv[1], "rb").read(1 << 20))
path, pid, stat = sys.argv[2], int(sys.argv[3]), sys.argv[4]
struct.pack_into("<I", good, 20, ((1 << 20) - 4096) // 256)  # nslots: what the copy holds
struct.pack_into("<i", good, 24, pid)
# made now, after this shell started, so the segment counts as live
struct.pack_into("<Q", good, 32, time.clock_gettime_ns(time.CLOCK_BOOTTIME))
rnd = random.Random(7)
def variants():
    yield b""
    yield good[:100]
    yield good[:4096]
    for off, fmt, val in ((12, "<I", 0), (12, "<I", 0xffffffff), (16, "<I", 1), (16, "<I", 0xffffff),
                          (20, "<I", 0xffffffff), (56, "<I", 0xffffffff), (8, "<I", 99)):
        b = bytearray(good); struct.pack_into(fmt, b, off, val); yield b
    b = bytearray(good); b[40:56] = b"\xff" * 16; yield b          # comm without its NUL
    for i in range(40):                                             # random slot bytes
        b = bytearray(good)
        for _ in range(64):
            b[rnd.randrange(4096, len(b))] = rnd.randrange(256)
        yield b
    for i in range(10):
        b = bytearray(good)
        for _ in range(32):
            b[rnd.randrange(56, 4096)] = rnd.randrange(256)
        yield b
for v in variants():
    open(path, "wb").write(v)
    for args in ([], ["-s"], ["-j"], ["--prometheus"], ["-s", "-j"]):
        r = subprocess.run([stat] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert r.returncode == 0, (args, r.returncode, r.stderr)
EOF
}

@test "rsock-stat: a fork child publishes the stream it inherits in a segment of its own" {
	export RSOCK_STATS=1
	start_bg c-srv with_preload python3 "$PAIR" server . c-srv 1000 10
	wait_file c-srv.port
	start_bg c-cli with_preload python3 "$PAIR" client . c-cli "$(cat c-srv.port)" 1000 10 fork 2500
	wait_file c-srv.ready
	wait_file c-cli.ready
	wait_file c-cli.child
	CLI=$(cat c-cli.ready)
	CHILD=$(cat c-cli.child)
	[ -e "/dev/shm/rsock-$CLI" ]
	[ -e "/dev/shm/rsock-$CHILD" ]
	run "$STAT" -j
	[ "$status" -eq 0 ]
	echo "$output" >out.json
	python3 - "$CLI" "$CHILD" <<'EOF'
import json, sys
objs = [json.loads(l) for l in open("out.json") if l.strip()]
parent = [o for o in objs if o["pid"] == int(sys.argv[1])]
child = [o for o in objs if o["pid"] == int(sys.argv[2])]
assert len(parent) == 1 and len(child) == 1, objs
# the child's counts start from what it inherited, as its rsock_stats do
assert parent[0]["tx_bytes"] == 1000, parent
assert child[0]["tx_bytes"] == 3500, child
assert parent[0]["local_port"] == child[0]["local_port"], (parent, child)
EOF
	touch stop
	for i in $(seq 1 100); do
		[ -e "/dev/shm/rsock-$CHILD" ] || [ -e "/dev/shm/rsock-$CLI" ] || break
		sleep 0.05
	done
	[ ! -e "/dev/shm/rsock-$CHILD" ]
	[ ! -e "/dev/shm/rsock-$CLI" ]
}

@test "rsock-stat: an exec removes the old image's segment" {
	pair e 10 10 exec
	for i in $(seq 1 100); do
		[ -e "/dev/shm/rsock-$CLI" ] || break
		sleep 0.05
	done
	[ ! -e "/dev/shm/rsock-$CLI" ]
	kill -0 "$CLI"
	run "$STAT" -p "$CLI"
	[ "${#lines[@]}" -eq 1 ]
}
