#!/usr/bin/env bats
# test bed: vm-pair
# Two hosts on a wire (test/vm/vm-pair): these tests run in guest a, their
# other ends in guest b (test/vm/peer), each guest with its own kernel, NIC
# and rxe device. Nothing is local to both ends: what crosses, crosses the
# wire, and a cut wire is an outage for kernel TCP as for RDMA.
#
# The subset of the RDMA suite that needs two hosts: librsock's stream both
# ways (IPv4, IPv6) with its bytes counted on both rxe devices, a plain peer
# on either side (kernel TCP, nothing on RDMA), and kernel TCP riding out a
# 3 s cut of the wire, from outside (the host) and from inside (b takes its
# NIC down): the yardstick for librsock's own behaviour under faults
# (wirefaults.bats).

load ../bats/helpers
load helpers
load rsock
load wire

@test "wire: two guests, each with its own rxe device on its own NIC; rping a -> b crosses the wire" {
	local r
	tap_note "pair ready in ${RSOCK_VM_PAIR_BOOT_S:-?} s after vm-pair started (a's guest in ${RSOCK_VM_BOOT_S:-?} s)"
	# the peer is not local: the route to b leaves through eth0
	r=$(ip route get "$ADDR_B")
	[[ $r == *"dev eth0"* ]] || { echo "$r" >&2; false; }
	r=$(ip -6 route get "$ADDR_B6")
	[[ $r == *"dev eth0"* ]] || { echo "$r" >&2; false; }
	[ "$(rdma_dev_of "$ADDR_A")" = rxe0 ]
	run "$PEER" run rdma link show
	[[ $output == *"rxe0/1 state ACTIVE"*"netdev eth0"* ]] || { echo "$output" >&2; false; }
	run "$PEER" run hostname
	[ "$output" = rsock-vm-b ]
	peer_start rping timeout 30 rping -s -a "$ADDR_B" -p 7174 -C 3
	peer_wait_rdma_listen 7174
	bounded 30 rping -c -a "$ADDR_B" -p 7174 -C 3
	peer_wait rping 30
}

# rdma_both_ways SRV_ADDR CLI_ADDR BYTES: librsock's stream both ways at once
# between a (client at CLI_ADDR) and b (server at SRV_ADDR), BYTES each way:
# checksums equal, the bytes on both rxe devices and in both ends' counters.
rdma_both_ways() {
	local n=$3 d
	d=$(peer_dir srv)
	wire_snapshot s
	stream_pair "$1" "$2" $n 0 "$(rsock_in srv "$d")" "$(rsock_in cli "$PWD")"
	wait_bg "$CLI_PID" 120
	peer_wait srv 60
	streams_match cli.out "$d/out"
	wire_crossed s $n $n
	stats_rdma cli.log $n tx
	stats_rdma cli.log $n rx
	stats_rdma "$d/srv.log" $n tx
	stats_rdma "$d/srv.log" $n rx
	tap_note "a: $(grep took cli.out), b: $(grep took "$d/out")"
}

@test "wire: librsock's stream both ways at once, 8 MB each, checksums equal, the bytes on both rxe devices" {
	rdma_both_ways "$ADDR_B" "$ADDR_A" 8000000
}

@test "wire: librsock's stream both ways over IPv6 (RoCEv2 on IPv6), 4 MB each, checksums equal, the bytes on both rxe devices" {
	rdma_both_ways "$ADDR_B6" "$ADDR_A6" 4000000
}

@test "wire: a librsock client of a plain server in b falls back to kernel TCP: intact both ways, nothing on RDMA" {
	local n=4000000 d
	d=$(peer_dir srv)
	wire_snapshot s
	stream_pair "$ADDR_B" "$ADDR_A" $n 0 "env -u LD_PRELOAD" "$(rsock_in cli "$PWD")"
	wait_bg "$CLI_PID" 60
	peer_wait srv 60
	streams_match cli.out "$d/out"
	stats_tcp cli.log peer
	wire_quiet s 100000
}

@test "wire: a plain client of a librsock server in b, over IPv6: kernel TCP, intact both ways, nothing on RDMA" {
	local n=4000000 d
	d=$(peer_dir srv)
	wire_snapshot s
	stream_pair "$ADDR_B6" "$ADDR_A6" $n 0 "$(rsock_in srv "$d")" "env -u LD_PRELOAD"
	wait_bg "$CLI_PID" 60
	peer_wait srv 60
	streams_match cli.out "$d/out"
	stats_tcp "$d/srv.log" peer
	wire_quiet s 100000
}

# cut_during_stream ADDR_B ADDR_A HOW: a paced kernel TCP stream both ways
# (4 MB each, about 6 s without a cut: a loaded host takes 2-3 s from the
# connect to the cut), the wire cut for 3 s a second after
# the client connected (HOW: host, the host's set_link off on both NICs, which the guests see
# as a lost carrier; inside, b's ip link set eth0 down, then up); both ends
# get every byte, and each saw the outage (a stall of 2.5 s or more) and
# came back from it.
cut_during_stream() {
	local d c i
	d=$(peer_dir srv)
	stream_pair "$1" "$2" 4000000 100 "env -u LD_PRELOAD" "env -u LD_PRELOAD"
	for ((i = 0; i < 300; i++)); do
		grep -q connected cli.out && break
		sleep 0.1
	done
	sleep 1
	if [ "$3" = host ]; then
		link_cut 3 >cut.txt &
		for ((i = 0; i < 40; i++)); do
			read -r c </sys/class/net/eth0/carrier
			[ "$c" = 0 ] && break
			sleep 0.05
		done
		[ "$c" = 0 ] || { echo "eth0 kept its carrier after set_link off" >&2; false; }
		wait $!
	else
		: >"$BATS_TEST_TMPDIR/.link_off"
		# shellcheck disable=SC2016 # b's shell expands them
		"$PEER" run bash -c 'ip link set eth0 down; t=$EPOCHREALTIME; sleep 3; ip link set eth0 up
			echo "the wire was off for $(awk -v a="$t" -v b="$EPOCHREALTIME" "BEGIN { printf \"%.1f\", b - a }") s"' >cut.txt
	fi
	rm -f "$BATS_TEST_TMPDIR/.link_off"
	wait_bg "$CLI_PID" 120
	peer_wait srv 60
	streams_match cli.out "$d/out"
	tap_note "$3: $(cat cut.txt); kernel TCP's longest stall: a $(stall_of cli.out) s, b $(stall_of "$d/out") s; the stream took $(awk '$1 == "took" { print $2 }' cli.out) s"
	awk -v a="$(stall_of cli.out)" -v b="$(stall_of "$d/out")" 'BEGIN { exit !(a >= 2.5 && b >= 2.5 && a < 20 && b < 20) }'
}

@test "wire: kernel TCP rides out a 3 s cut of the wire by the host (set_link off on both NICs): every byte arrives, both ends stalled and resumed" {
	cut_during_stream "$ADDR_B" "$ADDR_A" host
}

@test "wire: kernel TCP over IPv6 rides out b taking its NIC down for 3 s (ip link set eth0 down, up): every byte arrives, the addresses stay" {
	cut_during_stream "$ADDR_B6" "$ADDR_A6" inside
	run "$PEER" run ip -6 -br addr show dev eth0
	[[ $output == *"$ADDR_B6/64"* ]] || { echo "$output" >&2; false; }
}
