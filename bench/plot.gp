# plot.gp - the plots of bench/suite.sh and bench/shm.sh (run from the
# repository root):
#   gnuplot bench/plot.gp                    suite-lat.png, suite-bw.png
#   gnuplot -e 'bench = "shm"' bench/plot.gp shm-lat.png, shm-bw.png
if (!exists("bench")) bench = "suite"
set terminal pngcairo size 900,560 noenhanced
set datafile missing "-"
set key top left
set grid
set logscale x 2
set xlabel "message size (bytes)"

if (bench eq "suite") {
set output "bench/results/suite-lat.png"
set title "Ping-pong round trip, p50"
set ylabel "µs"
set logscale y
plot "bench/results/suite-lat.dat" using 1:2 with linespoints title "kernel TCP", \
     "" using 1:3 with linespoints title "rsocket", \
     "" using 1:4 with linespoints title "librsock", \
     "" using 1:5 with linespoints title "ib_write_lat x2", \
     "" using 1:6 with linespoints title "ib_send_lat x2"

set output "bench/results/suite-bw.png"
set title "Streaming throughput, one stream (4 streams dashed)"
set ylabel "MB/s"
unset logscale y
plot "bench/results/suite-bw.dat" using 1:2 with linespoints lc 1 title "kernel TCP", \
     "" using 1:3 with linespoints lc 2 title "rsocket", \
     "" using 1:4 with linespoints lc 3 title "librsock", \
     "" using 1:5 with lines dt 2 lc 1 title "kernel TCP x4", \
     "" using 1:6 with lines dt 2 lc 2 title "rsocket x4", \
     "" using 1:7 with lines dt 2 lc 3 title "librsock x4", \
     "" using 1:8 with linespoints lc 4 title "ib_write_bw"
}

if (bench eq "shm") {
set xtics ("64" 64, "256" 256, "1 KiB" 1024, "4 KiB" 4096, "16 KiB" 16384, "64 KiB" 65536, \
           "256 KiB" 262144, "1 MiB" 1048576)
set xrange [48:1400000]
set output "bench/results/shm-lat.png"
set title "Ping-pong round trip on one host, p50 (server and client on CPUs of their own)"
set ylabel "µs"
set logscale y
plot "bench/results/shm-lat.dat" using 1:2 with linespoints lc 1 title "kernel TCP (loopback)", \
     "" using 1:3 with linespoints lc 3 title "same-host path", \
     "" using 1:4 with linespoints lc 3 dt 2 title "same-host path, RSOCK_POLL_US=0"

set output "bench/results/shm-bw.png"
set title "Streaming throughput on one host, one stream"
set ylabel "MB/s"
set logscale y
plot "bench/results/shm-bw.dat" using 1:2 with linespoints lc 1 title "kernel TCP (loopback)", \
     "" using 1:3 with linespoints lc 3 title "same-host path", \
     "" using 1:4 with linespoints lc 3 dt 2 title "same-host path, RSOCK_POLL_US=0"
}
