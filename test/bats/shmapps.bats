#!/usr/bin/env bats
# Unmodified programs over the same-host path (doc/design.md, "The same-host
# path"), on by default: server and client on this host, both under the
# library, the bytes checked and the path asserted by each process's own
# counters (RSOCK_STATS=1: every stream on shm, none on TCP, bytes moved,
# none handed over to TCP: a stream's bytes count on its first path).
# A program that is not installed skips its test.

load helpers

setup_file() {
	require_build
}

setup() {
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	stop_all_bg
}

# need PROGRAM...: skip unless each is installed.
need() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || skip "$c is not installed"
	done
}

# shm_env NAME: a librsock process whose counters and log go to NAME.log.
shm_env() {
	echo RSOCK_STATS=1 RSOCK_LOG_FILE="$PWD/$1.log" LD_PRELOAD="$(rsock_preload_value)"
}

# on_shm LOG MIN_STREAMS MIN_BYTES: the process's last stats line counts at
# least MIN_STREAMS same-host streams, none on TCP or RDMA, and at least
# MIN_BYTES moved over shm (sent plus received).
on_shm() {
	local line
	line=$(grep -E 'info: stats: ' "$1" | tail -n 1)
	if ! [[ "$line" =~ streams\ tcp=([0-9]+)\ rdma=([0-9]+)\ shm=([0-9]+)\ .*\ shm\ tx=([0-9]+)\ rx=([0-9]+) ]]; then
		echo "no stats line in $1:" >&2
		cat "$1" >&2
		return 1
	fi
	local r=("${BASH_REMATCH[@]}")
	if [ "${r[1]}" != 0 ] || [ "${r[2]}" != 0 ] || [ "${r[3]}" -lt "$2" ] || [ $((r[4] + r[5])) -lt "$3" ] ||
		[[ "$line" != *" handovers=0 "* ]]; then
		echo "$1: expected >= $2 shm streams only, no hand-over to TCP, >= $3 bytes on shm: $line" >&2
		return 1
	fi
	echo "# $(basename "$1" .log): shm streams ${r[3]}, bytes tx ${r[4]} rx ${r[5]}" >&3
}

@test "redis-server + redis-benchmark GET/SET (1 and 8 connections) + redis-cli values, over shm" {
	need redis-server redis-benchmark redis-cli
	local port val
	port=$(free_port)
	start_bg srv env $(shm_env srv) redis-server --port "$port" --bind 127.0.0.1 --save '' \
		--appendonly no --daemonize no --dir "$PWD" --loglevel warning
	wait_for_port "$port" 15 "$BG_PID"
	for c in 1 8; do
		bounded 60 env $(shm_env "b$c") redis-benchmark -h 127.0.0.1 -p "$port" -q -n 20000 -c "$c" \
			-t set,get -d 64 >"b$c.out" 2>&1 || { cat "b$c.out" >&2; false; }
		[ "$(tr '\r' '\n' <"b$c.out" | grep -c 'requests per second')" -eq 2 ]
		echo "# -c $c: $(tr '\r' '\n' <"b$c.out" | grep 'requests per second' | tr '\n' ' ')" >&3
		on_shm "b$c.log" "$c" $((20000 * 2 * 64))
	done
	val="v-$RANDOM-$(head -c 30000 /dev/urandom | base64 -w0)"
	bounded 15 env $(shm_env cli) redis-cli -h 127.0.0.1 -p "$port" SET rsock:key "$val" >set.out
	[ "$(cat set.out)" = OK ]
	bounded 15 env $(shm_env cli2) redis-cli -h 127.0.0.1 -p "$port" GET rsock:key >get.out
	[ "$(cat get.out)" = "$val" ]
	on_shm cli2.log 1 30000
	bounded 15 env $(shm_env cli3) redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
	wait_bg "$BG_PID" 15
	on_shm srv.log 18 $((20000 * 4 * 64))
}

@test "nginx (2 workers) + wrk, and a file byte-exact to an HTTP client, over shm" {
	need wrk python3
	local nginx port dir
	nginx=$(command -v nginx || echo /usr/sbin/nginx)
	[ -x "$nginx" ] || skip "nginx is not installed"
	port=$(free_port)
	dir=$PWD/ng
	nginx_conf "$dir" "$port" 2
	rand_file "$dir/www/file.bin" 2000000
	head -c 1024 /dev/urandom >"$dir/www/k1"
	start_bg ng env $(shm_env ng) "$nginx" -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log"
	wait_for_port "$port" 15 "$BG_PID" || { cat "$dir/logs/error.log" >&2; false; }
	# python's urllib, not curl: curl hangs with libasan preloaded (programs.bats)
	bounded 30 env $(shm_env get) python3 "$BATS_TEST_DIRNAME/fetch.py" "http://127.0.0.1:$port/file.bin" got.bin
	same_file "$dir/www/file.bin" got.bin "nginx -> fetch.py over shm"
	on_shm get.log 1 2000000
	bounded 30 env $(shm_env wrk) wrk -t 2 -c 8 -d 2 "http://127.0.0.1:$port/k1" >wrk.out 2>&1 ||
		{ cat wrk.out >&2; false; }
	cat wrk.out
	grep -qE 'Requests/sec: +[1-9]' wrk.out
	! grep -qE 'Non-2xx|Socket errors' wrk.out || false
	echo "# wrk: $(grep -E 'Requests/sec' wrk.out)" >&3
	on_shm wrk.log 8 100000
}

@test "memcached (4 threads) with a client that sets and checks 2,000 values, over shm" {
	need memcached python3
	local port
	port=$(free_port)
	start_bg srv env $(shm_env srv) memcached -t 4 -l 127.0.0.1 -p "$port" -U 0 -u nobody
	wait_for_port "$port" 15 "$BG_PID"
	bounded 60 env $(shm_env cli) python3 - "$port" <<'EOF'
import hashlib, os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
f = s.makefile("rb")
vals = {}
for i in range(2000):
    v = hashlib.sha256(b"%d" % i).hexdigest().encode() * (1 + i % 40)
    vals[b"k%d" % i] = v
    s.sendall(b"set k%d 0 0 %d\r\n%s\r\n" % (i, len(v), v))
    assert f.readline() == b"STORED\r\n"
for k, v in vals.items():
    s.sendall(b"get " + k + b"\r\n")
    hdr = f.readline().split()
    assert hdr[:2] == [b"VALUE", k] and int(hdr[3]) == len(v), hdr
    assert f.read(len(v) + 2) == v + b"\r\n" and f.readline() == b"END\r\n", k
print("memcached: 2000 values intact")
EOF
	on_shm cli.log 1 2000000
}

@test "iperf3 -n 200M both ways over shm: exit 0, the JSON reports the bytes" {
	need iperf3
	local port
	port=$(free_port)
	start_bg srv env $(shm_env srv) iperf3 -s -B 127.0.0.1 -p "$port"
	wait_for_port "$port" 20 "$BG_PID"
	bounded 60 env $(shm_env up) iperf3 -c 127.0.0.1 -p "$port" -n 200M -J >up.json
	bounded 60 env $(shm_env down) iperf3 -c 127.0.0.1 -p "$port" -n 200M -R -J >down.json
	python3 - <<'EOF'
import json
for f in ("up.json", "down.json"):
    j = json.load(open(f))
    sent, got = j["end"]["sum_sent"]["bytes"], j["end"]["sum_received"]["bytes"]
    assert sent >= 200 << 20 and got > (200 << 20) * 0.99, (f, sent, got)
    print("# iperf3 %s: %.1f Gbit/s" % (f[:-5], j["end"]["sum_received"]["bits_per_second"] / 1e9))
EOF
	on_shm up.log 2 $((200 << 20))
	on_shm down.log 2 $((200 << 20))
}

@test "Python asyncio echo: 16 connections, 4 MB each, checksums equal, over shm" {
	need python3
	rm -f port
	start_bg srv env $(shm_env srv) python3 -c '
import asyncio, sys
async def echo(r, w):
    while data := await r.read(65536):
        w.write(data)
        await w.drain()
    w.close()
async def main():
    srv = await asyncio.start_server(echo, "127.0.0.1", 0)
    open(sys.argv[1] + ".tmp", "w").write(str(srv.sockets[0].getsockname()[1]))
    __import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
    async with srv:
        await srv.serve_forever()
asyncio.run(main())' "$PWD/port"
	for _ in $(seq 1 200); do [ -s port ] && break; sleep 0.05; done
	bounded 60 env $(shm_env cli) python3 - "$(cat port)" <<'EOF'
import asyncio, hashlib, os, sys
async def one(i):
    r, w = await asyncio.open_connection("127.0.0.1", int(sys.argv[1]))
    data = os.urandom(4 << 20)
    async def send():
        for o in range(0, len(data), 100000):
            w.write(data[o:o + 100000])
            await w.drain()
        w.write_eof()
    t = asyncio.create_task(send())
    h, n = hashlib.sha256(), 0
    while chunk := await r.read(1 << 16):
        h.update(chunk)
        n += len(chunk)
    await t
    w.close()
    assert n == len(data) and h.digest() == hashlib.sha256(data).digest(), i
async def main():
    await asyncio.gather(*(one(i) for i in range(16)))
    print("asyncio echo: 16 x 4 MB intact")
asyncio.run(main())
EOF
	on_shm cli.log 16 $((2 * 16 * 4 << 20))
}

@test "PostgreSQL (server as postgres, fork-after-accept backends) with pgbench -c 4, client as root" {
	local bin=/usr/lib/postgresql/15/bin port
	[ -x "$bin/postgres" ] || bin=$(dirname "$(command -v postgres || echo /x/y)")
	[ -x "$bin/postgres" ] || skip "postgres is not installed"
	need pgbench runuser
	# pgbench, as curl, hangs at exit with libasan preloaded, librsock or
	# not (p11-kit's destructor waits for the setlocale lock)
	[ -z "${RSOCK_SAN_PRELOAD:-}" ] || skip "pgbench hangs with $RSOCK_SAN_PRELOAD preloaded, without librsock too"
	[ "$(id -u)" = 0 ] || skip "needs root to run the server as postgres"
	id postgres >/dev/null 2>&1 || skip "no user postgres"
	port=$(free_port)
	pg_cluster "$bin"
	start_bg srv runuser -u postgres -- env RSOCK_STATS=1 RSOCK_LOG_FILE="$PG/srv.log" \
		LD_PRELOAD="$(rsock_preload_value)" "$bin/postgres" -D "$PG/data" \
		-h 127.0.0.1 -p "$port" -k "$PG" -c fsync=off
	wait_for_port "$port" 30 "$BG_PID"
	bounded 120 env $(shm_env init) pgbench -h 127.0.0.1 -p "$port" -U postgres -i -s 1 postgres >init.txt 2>&1 ||
		{ cat init.txt >&2; false; }
	bounded 120 env $(shm_env pgb) pgbench -h 127.0.0.1 -p "$port" -U postgres -c 4 -T 3 postgres >pgb.txt 2>&1 ||
		{ cat pgb.txt >&2; false; }
	cat pgb.txt
	grep -q 'number of failed transactions: 0' pgb.txt
	echo "# pgbench -c 4: $(grep -oE 'tps = [0-9.]+' pgb.txt | tail -1)" >&3
	on_shm init.log 1 100000
	on_shm pgb.log 5 100000
	stop_bg "$BG_PID"
	# Each backend set its stream up at its first use: no hand-over to TCP
	# anywhere, and at least the 4 clients' backends moved bytes on shm.
	cp "$PG/srv.log" srv.log
	rm -rf "$PG"
	! grep -E 'handovers=[1-9]' srv.log || false
	[ "$(grep -cE 'streams tcp=0 rdma=0 shm=[1-9].* shm tx=[1-9][0-9]{4,} rx=[1-9][0-9]{4,}' srv.log)" -ge 4 ]
}
