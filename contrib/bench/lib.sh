# shellcheck shell=bash
# Shared by the live-cluster benchmarks (sourced, not run): ports and directories of their own,
# cluster start/stop, and a cleanup trap that stops every cluster and helper process they started.
#
# The benchmark clusters use their own ports, so they can run while the live tests (26817...) or
# the demo (16817...) run: SLURMCTLD_PORT=56817 SLURMDBD_PORT=56819 MARIADB_PORT=53306
# SLURMD_PORT_BASE=57001 (override through the environment), and directories /tmp/teamshare-bench-*.

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
export SLURMCTLD_PORT=${SLURMCTLD_PORT:-56817}
export SLURMDBD_PORT=${SLURMDBD_PORT:-56819}
export MARIADB_PORT=${MARIADB_PORT:-53306}
export SLURMD_PORT_BASE=${SLURMD_PORT_BASE:-57001}
export READY_TIMEOUT=${READY_TIMEOUT:-60}
export CLUSTER_NAME=${CLUSTER_NAME:-teamshare-live}

BENCH_CLUSTERS=()
BENCH_PIDS=()

bench_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
bench_die() { bench_log "ERROR: $*"; exit 1; }

# The binaries under test, copied so that a rebuild elsewhere during the run changes nothing.
# Sets BIN_ACCOUNTD and BIN_PLUGIN.
bench_binaries() { # dir
    local dir=$1/bin
    local accountd=${ACCOUNTD:-$BENCH_ROOT/target/release/accountd}
    local plugin=${TEAMSHARE_PLUGIN:-$BENCH_ROOT/target/release/libjob_submit_teamshare.so}
    [[ -x $accountd ]] || bench_die "no accountd at $accountd: run cargo build --release first"
    [[ -f $plugin ]] || bench_die "no plugin at $plugin: run cargo build --release first"
    mkdir -p "$dir"
    cp "$accountd" "$dir/accountd"
    cp "$plugin" "$dir/libjob_submit_teamshare.so"
    # shellcheck disable=SC2034 # used by the scripts that source this file
    BIN_ACCOUNTD=$dir/accountd
    # shellcheck disable=SC2034
    BIN_PLUGIN=$dir/libjob_submit_teamshare.so
    bench_log "accountd: $accountd ($(stat -c %y "$accountd" | cut -d. -f1))"
    bench_log "plugin:   $plugin ($(stat -c %y "$plugin" | cut -d. -f1))"
}

# bench_start DIR [VAR=value...]: start.sh DIR with these extra environment variables.
bench_start() {
    local dir=$1
    shift
    case $dir in
        /tmp/teamshare-bench-*) ;;
        *) bench_die "benchmark clusters live under /tmp/teamshare-bench-* (got $dir)" ;;
    esac
    BENCH_CLUSTERS+=("$dir")
    mkdir -p "$(dirname "$dir")"
    bench_log "starting cluster $dir ($*)"
    if ! env "$@" "$BENCH_ROOT/contrib/cluster/start.sh" "$dir" >"$dir.start.log" 2>&1; then
        tail -30 "$dir.start.log" >&2
        bench_die "start.sh $dir failed (log: $dir.start.log)"
    fi
}

bench_stop() { # dir
    "$BENCH_ROOT/contrib/cluster/stop.sh" "$1" >"$1.stop.log" 2>&1 || bench_log "stop.sh $1 failed (see $1.stop.log)"
    local keep=()
    for d in "${BENCH_CLUSTERS[@]}"; do [[ $d == "$1" ]] || keep+=("$d"); done
    BENCH_CLUSTERS=("${keep[@]}")
}

# Remember a background helper's pid; the cleanup stops it (by that pid only).
bench_track() { BENCH_PIDS+=("$1"); }

bench_kill_tracked() {
    local p
    for p in "${BENCH_PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    BENCH_PIDS=()
}

bench_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    bench_kill_tracked
    local d
    for d in "${BENCH_CLUSTERS[@]}"; do
        bench_log "stopping cluster $d"
        "$BENCH_ROOT/contrib/cluster/stop.sh" "$d" >"$d.stop.log" 2>&1 || true
    done
    exit "$rc"
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

# Percentile of numbers on stdin (nearest rank on the sorted list); p in 0..100.
bench_percentile() { # p
    sort -n | awk -v p="$1" '{ v[NR] = $1 } END {
        if (NR == 0) { print "-"; exit }
        r = int(p / 100 * (NR - 1) + 0.5) + 1; if (r > NR) r = NR; print v[r] }'
}

bench_machine() {
    echo "machine: $(nproc) vCPU $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(. /etc/os-release; echo "$PRETTY_NAME"), Slurm $(dpkg-query -W -f="\${Version}" slurmctld 2>/dev/null)"
}
bench_load() { cut -d' ' -f1-3 /proc/loadavg; }
