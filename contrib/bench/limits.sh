#!/usr/bin/env bash
# One team limit move through sacctmgr against one through the limits helper (issue 26).
#
#   contrib/bench/limits.sh [DIR]      DIR default /tmp/teamshare-bench-limits
#   MOVES=200 contrib/bench/limits.sh
#
# On a throwaway cluster (the live tests' configuration), MOVES changes of one account's
# GrpTRES, alternating values: first each as `sacctmgr -i modify account ... set GrpTRES=...`
# (what the governor ran per move before, and still runs with TEAMSHARE_SLURM_READER=commands),
# then all through one `accountd slurm-limits-helper` (the governor's way: one process kept,
# a line per move). Prints per move the wall time and the CPU of the processes (user + system,
# children included), and the CPU slurmdbd and slurmctld spent meanwhile. Checks that Slurm
# holds the last value after each way. Environment: MOVES (200), ACCOUNTD, ports (lib.sh).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=${1:-/tmp/teamshare-bench-limits}
MOVES=${MOVES:-200}
[[ $(id -u) == 0 ]] || bench_die "run as root (the throwaway cluster runs as root)"
bench_binaries "$DIR-bin"
bench_start "$DIR" TEAMSHARE_CONFIG="$BENCH_ROOT/tests/live/teamshare.toml" ACCOUNTD="$BIN_ACCOUNTD" \
    JOB_SUBMIT_PLUGINS=none
export SLURM_CONF=$DIR/etc/slurm.conf
CLK=$(getconf CLK_TCK)
DBD_PID=$(cat "$DIR/pids/slurmdbd.pid")
CTLD_PID=$(cat "$DIR/pids/slurmctld.pid")
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
self_ticks() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$$/stat"; }
grp() { sacctmgr -nP show assoc where account=agents user= format=grptres; }

measure() { # label command...
    local label=$1 t0 c0 d0 s0
    shift
    t0=$EPOCHREALTIME c0=$(self_ticks) d0=$(ticks "$DBD_PID") s0=$(ticks "$CTLD_PID")
    "$@"
    awk -v l="$label" -v n="$MOVES" -v t0="$t0" -v t1="$EPOCHREALTIME" -v c0="$c0" -v c1="$(self_ticks)" \
        -v d0="$d0" -v d1="$(ticks "$DBD_PID")" -v s0="$s0" -v s1="$(ticks "$CTLD_PID")" -v k="$CLK" \
        'BEGIN { printf "| %s | %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms |\n", l, n,
                 1000 * (t1 - t0) / n, 1000 * (c1 - c0) / k / n, 1000 * (d1 - d0) / k / n,
                 1000 * (s1 - s0) / k / n }'
}

by_sacctmgr() {
    for ((i = 1; i <= MOVES; i++)); do
        sacctmgr -i modify account where name=agents cluster="$CLUSTER_NAME" \
            set GrpTRES=gres/gpu=$((i % 7 + 1)) >/dev/null
    done
}
by_helper() {
    for ((i = 1; i <= MOVES; i++)); do
        printf '%s\tagents\tgres/gpu=%d\n' "$CLUSTER_NAME" $((i % 7 + 1))
    done | "$BIN_ACCOUNTD" slurm-limits-helper >"$DIR/helper.out"
    local ok
    ok=$(grep -c '^ok$' "$DIR/helper.out" || true)
    ((ok == MOVES)) || bench_die "the helper answered $ok of $MOVES moves ok (see $DIR/helper.out)"
}

echo "| way | moves | wall per move | CPU per move (client) | slurmdbd CPU per move | slurmctld CPU per move |"
echo "|---|---|---|---|---|---|"
measure sacctmgr by_sacctmgr
[[ $(grp) == "gres/gpu=$((MOVES % 7 + 1))" ]] || bench_die "after sacctmgr Slurm holds $(grp)"
sacctmgr -i modify account where name=agents set GrpTRES=gres/gpu=9 >/dev/null
measure helper by_helper
[[ $(grp) == "gres/gpu=$((MOVES % 7 + 1))" ]] || bench_die "after the helper Slurm holds $(grp)"
bench_machine
