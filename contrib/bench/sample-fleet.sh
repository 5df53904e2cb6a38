#!/bin/bash
# Benchmark (issue 29): sampling and collection on a simulated fleet: NODES `accountd sample`
# processes (one per node, 8 fake GPUs each through contrib/fake-nvml) on this machine, for
# DURATION seconds after a warm-up, while the head's collection runs every INGEST seconds
# (`accountd collect-samples`, the daemon's collection step, into one database).
#
#   contrib/bench/sample-fleet.sh [DIR]       DIR default /tmp/teamshare-bench-fleet
#
# Per sampler: CPU from /proc/PID/task/*/schedstat (nanoseconds; /proc/PID/stat's 10 ms ticks
# are too coarse for a process this quiet, and are summed over the fleet as a cross-check), as a
# share of one core: mean and max over the fleet. Per collection: wall, user and system time
# (/usr/bin/time), files and samples; the daemon's share of a core is the collections' CPU over
# the time measured. A collection here is a whole process (configuration, database opened): the
# daemon's step, with its database open already, costs a little less.
#
# The samplers run with --no-jobs: without slurmd there is no job to look up, and every sample
# carries no job (collected and stored all the same). The job lookup's own cost (a few ms of
# child processes every 10 s) is section 6's.
#
# Environment: NODES (64), INTERVALS ("10s 1s": the example configuration's sample_interval,
# then 1 s), DURATION (120), INGEST (60: the example's ingest_interval), WARMUP (10), ACCOUNTD,
# NVML_LIB (target/release/libnvidia_ml.so). Builds nothing.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=${1:-/tmp/teamshare-bench-fleet}
NODES=${NODES:-64}
INTERVALS=${INTERVALS:-10s 1s}
DURATION=${DURATION:-120}
INGEST=${INGEST:-60}
WARMUP=${WARMUP:-10}
NVML_LIB=${NVML_LIB:-$BENCH_ROOT/target/release/libnvidia_ml.so}
ACCOUNTD=${ACCOUNTD:-$BENCH_ROOT/target/release/accountd}
[[ -x $ACCOUNTD ]] || bench_die "no accountd at $ACCOUNTD: run cargo build --release"
[[ -f $NVML_LIB ]] || bench_die "no fake NVML at $NVML_LIB: run cargo build --release -p fake-nvml"
[[ -x /usr/bin/time ]] || bench_die "no /usr/bin/time (apt-get install time)"
case $DIR in /tmp/teamshare-bench-*) ;; *) bench_die "DIR must be /tmp/teamshare-bench-*" ;; esac
mkdir -p "$DIR/bin"
cp "$ACCOUNTD" "$DIR/bin/accountd"
cp "$NVML_LIB" "$DIR/bin/libnvidia_ml.so"

# 8 fake H100s, utilisation changing every 20 s (as sample-cost.sh).
{
    echo "# contrib/bench/sample-fleet.sh: 8 fake H100s"
    for m in 7 6 5 4 3 2 1 0; do
        echo "gpu $m uuid=GPU-bench-000$m name=\"Fake H100\" memory=81559"
    done
    for m in 0 1 2 3 4 5 6 7; do
        for step in 0 1 2 3 4 5 6 7 8; do
            echo "util $m +$((step * 20)) $(((m * 13 + step * 37) % 101)) $((1000 + m * 4000 + step * 100)) $(((m * 7 + step * 11) % 101))"
        done
    done
} >"$DIR/gpus.txt"
cat >"$DIR/teamshare.toml" <<EOF
[cluster]
name = "fleet"
partitions = ["gpu"]
currency = "EUR"

[gpu_types.default]
rate_per_hour = 2.5

[[team]]
name = "t"
quota = 512
weight = 1

[accountd]
database = "$DIR/accountd.db"
sample_spool = "$DIR/spool"
EOF

sched_ns() { # pid -> CPU ns of all its threads
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'
}
stat_ticks() { # pid -> utime+stime in clock ticks
    local s
    s=$(cat "/proc/$1/stat")
    s=${s##*) }
    awk '{ print $12 + $13 }' <<<"$s"
}

collect() { # label n -> one line of DIR/collect-LABEL.txt: wall user sys files samples
    local out=$DIR/collect-$1-$2.err
    /usr/bin/time -f '%e %U %S' -o "$DIR/collect-$1-$2.time" \
        "$DIR/bin/accountd" --config "$DIR/teamshare.toml" collect-samples >/dev/null 2>"$out"
    local files samples
    files=$(sed -n 's/^collected \([0-9]*\) batch.*/\1/p' "$out")
    samples=$(sed -n 's/.*: \([0-9]*\) new sample.*/\1/p' "$out")
    echo "$(cat "$DIR/collect-$1-$2.time") ${files:-?} ${samples:-?}" >>"$DIR/collect-$1.txt"
}

RESULTS=$DIR/results.txt
: >"$RESULTS"
run_fleet() { # interval
    local interval=$1 label=$1
    rm -rf "$DIR/spool" "$DIR"/accountd.db* "$DIR/collect-$label".*
    : >"$DIR/collect-$label.txt"
    mkdir -p "$DIR/spool"
    local pids=() n
    for ((n = 0; n < NODES; n++)); do
        FAKE_NVML_SCRIPT=$DIR/gpus.txt "$DIR/bin/accountd" --config "$DIR/teamshare.toml" sample \
            --no-jobs --interval "$interval" --node "$(printf 'n%02d' "$n")" --spool "$DIR/spool" \
            --nvml-lib "$DIR/bin/libnvidia_ml.so" >"$DIR/sample-$label-$n.log" 2>&1 &
        pids+=($!)
        bench_track "$!"
    done
    sleep "$WARMUP"
    # What the warm-up spooled is collected first, outside the measurement.
    collect "$label" warmup
    : >"$DIR/collect-$label.txt"
    local ns0=() ticks0=0 p
    for p in "${pids[@]}"; do
        kill -0 "$p" 2>/dev/null || bench_die "sampler $p exited (see $DIR/sample-$label-*.log)"
        ns0+=("$(sched_ns "$p")")
        ticks0=$((ticks0 + $(stat_ticks "$p")))
    done
    local t0=$EPOCHREALTIME load0
    load0=$(bench_load)
    local k=0 elapsed
    while :; do
        sleep "$INGEST"
        k=$((k + 1))
        collect "$label" "$k"
        elapsed=$(echo "$EPOCHREALTIME - $t0" | bc -l)
        (($(echo "$elapsed >= $DURATION" | bc -l))) && break
    done
    # The samplers' CPU up to the end of the last collection; the wall time likewise.
    local wall shares=() ticks1=0 i=0
    wall=$(echo "$EPOCHREALTIME - $t0" | bc -l)
    for p in "${pids[@]}"; do
        kill -0 "$p" 2>/dev/null || bench_die "sampler $p exited during the run"
        shares+=("$(echo "100 * ($(sched_ns "$p") - ${ns0[$i]}) / 1000000000 / $wall" | bc -l)")
        ticks1=$((ticks1 + $(stat_ticks "$p")))
        i=$((i + 1))
    done
    local rss
    rss=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/${pids[0]}/status")
    bench_kill_tracked
    local mean max tck fleet_ticks
    mean=$(printf '%s\n' "${shares[@]}" | awk '{ s += $1 } END { printf "%.4f", s / NR }')
    max=$(printf '%s\n' "${shares[@]}" | sort -g | tail -1)
    tck=$(getconf CLK_TCK)
    fleet_ticks=$(echo "100 * ($ticks1 - $ticks0) / $tck / $wall" | bc -l)
    # Collections: CPU (user+sys) over the wall time measured.
    local c_cpu c_wall_max c_cpu_max c_files c_samples
    read -r c_cpu c_wall_max c_cpu_max c_files c_samples < <(awk '
        { cpu += $2 + $3; if ($1 > w) w = $1; if ($2 + $3 > m) m = $2 + $3; f += $4; s += $5 }
        END { print cpu, w, m, f, s }' "$DIR/collect-$label.txt")
    local db_mib
    db_mib=$(du -cm "$DIR"/accountd.db* | tail -1 | cut -f1)
    printf '%-8s %5d %6.1f %9.4f %9.4f %9.3f %7.1f %4d %7d %8d %8.2f %8.2f %9.3f %6s %s\n' "$label" \
        "$NODES" "$wall" "$mean" "$max" "$fleet_ticks" "$(echo "$rss / 1024" | bc -l)" "$k" \
        "$c_files" "$c_samples" "$c_wall_max" "$c_cpu_max" \
        "$(echo "100 * $c_cpu / $wall" | bc -l)" "$db_mib" "$load0 / $(bench_load)" >>"$RESULTS"
    tail -1 "$RESULTS" >&2
}

bench_log "$(bench_machine); load $(bench_load)"
unset SLURM_CONF
for interval in $INTERVALS; do
    bench_log "fleet of $NODES samplers at $interval, ${DURATION} s, collection every ${INGEST} s"
    run_fleet "$interval"
done

echo
bench_machine
echo "$NODES x accountd sample --no-jobs (8 fake GPUs each), collect-samples every ${INGEST} s, ${DURATION} s measured after ${WARMUP} s"
printf '%-8s %5s %6s %9s %9s %9s %7s %4s %7s %8s %8s %8s %9s %6s %s\n' interval nodes "wall s" \
    "node mean%" "node max%" "fleet% tck" "RSS MiB" colls files samples "coll s max" "CPU s max" \
    "collect %" "DB MiB" "load start / end"
cat "$RESULTS"
