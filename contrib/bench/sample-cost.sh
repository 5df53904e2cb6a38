#!/bin/bash
# Benchmark: what `accountd sample` costs on a GPU node: 8 GPUs sampled every second through the
# fake NVML library (contrib/fake-nvml), over DURATION seconds (default 60) after a 5 s warm-up.
# CPU: utime+stime of the sampler from /proc/PID/stat (and of the child processes it ran and
# waited for, cutime+cstime: the scontrol/slurmd job lookups), as a share of one core. Memory:
# VmRSS at the end and VmHWM (peak) from /proc/PID/status. /proc/PID/stat counts in clock ticks
# (10 ms), too coarse for a process this quiet, so the CPU time is also read in nanoseconds from
# /proc/PID/task/*/schedstat (all threads).
#
#   contrib/bench/sample-cost.sh [DIR]       DIR default /tmp/teamshare-bench-sample
#
# Two runs: `--no-jobs` (NVML and the spool only), then, unless WITH_JOBS=0, with the job lookup
# on against a throwaway cluster (ports of lib.sh; 4 one-GPU jobs running on node n1; lookups
# every 10 s, the default for a 1 s interval).
# Environment: DURATION (60), WITH_JOBS (1), ACCOUNTD, NVML_LIB (target/release/libnvidia_ml.so;
# `cargo build --release -p fake-nvml`). Builds nothing.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=${1:-/tmp/teamshare-bench-sample}
DURATION=${DURATION:-60}
WITH_JOBS=${WITH_JOBS:-1}
NVML_LIB=${NVML_LIB:-$BENCH_ROOT/target/release/libnvidia_ml.so}
ACCOUNTD=${ACCOUNTD:-$BENCH_ROOT/target/release/accountd}
[[ -x $ACCOUNTD ]] || bench_die "no accountd at $ACCOUNTD: run cargo build --release"
[[ -f $NVML_LIB ]] || bench_die "no fake NVML at $NVML_LIB: run cargo build --release -p fake-nvml"
case $DIR in /tmp/teamshare-bench-*) ;; *) bench_die "DIR must be /tmp/teamshare-bench-*" ;; esac
mkdir -p "$DIR/bin"
cp "$ACCOUNTD" "$DIR/bin/accountd"
cp "$NVML_LIB" "$DIR/bin/libnvidia_ml.so"

# 8 GPUs (minors 7..0, so NVML index != minor), utilisation changing every 20 s.
{
    echo "# contrib/bench/sample-cost.sh: 8 fake H100s"
    for m in 7 6 5 4 3 2 1 0; do
        echo "gpu $m uuid=GPU-bench-000$m name=\"Fake H100\" memory=81559"
    done
    for m in 0 1 2 3 4 5 6 7; do
        for step in 0 1 2 3 4 5 6 7 8; do
            echo "util $m +$((step * 20)) $(((m * 13 + step * 37) % 101)) $((1000 + m * 4000 + step * 100)) $(((m * 7 + step * 11) % 101))"
        done
    done
} >"$DIR/gpus.txt"

stat_ticks() { # pid -> "utime+stime cutime+cstime" in clock ticks
    local s
    s=$(cat "/proc/$1/stat")
    s=${s##*) }
    awk '{ print $12 + $13, $14 + $15 }' <<<"$s"
}
sched_ns() { # pid -> CPU ns of all its threads
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'
}
status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

RESULTS=$DIR/results.txt
: >"$RESULTS"
measure() { # label extra-args...
    local label=$1
    shift
    rm -rf "$DIR/spool"
    FAKE_NVML_SCRIPT=$DIR/gpus.txt "$DIR/bin/accountd" sample --interval 1s --node n1 \
        --spool "$DIR/spool" --nvml-lib "$DIR/bin/libnvidia_ml.so" "$@" >"$DIR/sample-$label.log" 2>&1 &
    local pid=$!
    bench_track "$pid"
    sleep 5
    kill -0 "$pid" 2>/dev/null || { cat "$DIR/sample-$label.log" >&2; bench_die "the sampler exited"; }
    local a b t0 t1 files0 files1
    read -r a b <<<"$(stat_ticks "$pid")"
    local ns0 ns1
    ns0=$(sched_ns "$pid")
    files0=$(find "$DIR/spool" -type f | wc -l)
    t0=$EPOCHREALTIME
    sleep "$DURATION"
    local c d
    read -r c d <<<"$(stat_ticks "$pid")"
    ns1=$(sched_ns "$pid")
    t1=$EPOCHREALTIME
    files1=$(find "$DIR/spool" -type f | wc -l)
    local rss hwm threads
    rss=$(status_kb "$pid" VmRSS)
    hwm=$(status_kb "$pid" VmHWM)
    threads=$(status_kb "$pid" Threads)
    bench_kill_tracked
    local tck wall
    tck=$(getconf CLK_TCK)
    wall=$(echo "$t1 - $t0" | bc -l)
    printf '%-22s %6.1f %9.3f %8.3f %10.4f %9.4f %8.3f %9.3f %8.1f %8.1f %7s %6s\n' "$label" "$wall" \
        "$(echo "($c - $a) / $tck" | bc -l)" "$(echo "100 * ($c - $a) / $tck / $wall" | bc -l)" \
        "$(echo "($ns1 - $ns0) / 1000000000" | bc -l)" "$(echo "100 * ($ns1 - $ns0) / 1000000000 / $wall" | bc -l)" \
        "$(echo "($d - $b) / $tck" | bc -l)" "$(echo "100 * ($c - $a + $d - $b) / $tck / $wall" | bc -l)" \
        "$(echo "$rss / 1024" | bc -l)" "$(echo "$hwm / 1024" | bc -l)" "$((files1 - files0))" "$threads" >>"$RESULTS"
    tail -1 "$RESULTS" >&2
}

bench_log "$(bench_machine); load $(bench_load)"
unset SLURM_CONF
measure "no-jobs" --no-jobs
if [[ $WITH_JOBS == 1 ]]; then
    bench_binaries "$DIR-bin"
    bench_start "$DIR-cluster" TEAMSHARE_CONFIG="$BENCH_ROOT/tests/live/teamshare.toml" \
        TEAMSHARE_PLUGIN="$BIN_PLUGIN" ACCOUNTD="$BIN_ACCOUNTD"
    export SLURM_CONF=$DIR-cluster/etc/slurm.conf
    for _ in 1 2 3 4; do
        sbatch --parsable -o /dev/null -A training -p gpu -w n1 --gres=gpu:1 --wrap 'sleep 600' >/dev/null
    done
    measure "job-lookup-every-10s"
    scancel -u root || true
    bench_stop "$DIR-cluster"
fi

echo
bench_machine
echo "accountd sample --interval 1s, 8 fake GPUs (contrib/fake-nvml), ${DURATION} s measured after 5 s"
printf '%-22s %6s %9s %8s %10s %9s %8s %9s %8s %8s %7s %6s\n' run "wall s" "stat CPU" "% core" "sched CPU" "% core" "child s" "% w/child" "RSS MiB" "peak" ticks threads
cat "$RESULTS"
