# bench/chart.gp: workloads 2 (drain by batch size) and 5 (drain rate by
# clients) side by side.  Run in bench/out/ (drain.dat, scale.dat, scale.gp,
# all written by report.js).
set terminal pngcairo size 1500,560 font "DejaVu Sans,10"
set output "chart.png"
set multiplot layout 1,2
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set logscale y
set grid ytics
set ylabel "jobs/s (log)"
set title "2. Drain a backlog: claim + complete"
set key top left
set xtics rotate by -20
plot "drain.dat" using 2:xtic(1) title "batch 1", '' using 3 title "batch 10", '' using 4 title "batch 100"
unset style
load "scale.gp"
set style data linespoints
set title sprintf("5. Drain rate by clients (claim 10 + complete + enqueue 10): backlog %s solid, %s dashed", hi, lo)
set xlabel "clients"
set logscale x 2
unset logscale y
set yrange [0:*]
set ylabel "jobs/s"
set xtics norotate
set key top left
plot for [i=1:nc] "scale.dat" using 1:(column(1 + (i - 1) * nb + nb)) title names[i] lw 2 lc i dt 1, \
     for [i=1:nc] "scale.dat" using 1:(column(1 + (i - 1) * nb + 1)) notitle lw 1 lc i dt 2
unset multiplot
