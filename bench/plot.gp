# plot.gp - the plots of bench/suite.sh (run from the repository root).
set terminal pngcairo size 900,560 noenhanced
set datafile missing "-"
set key top left
set grid
set logscale x 2
set xlabel "message size (bytes)"

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
