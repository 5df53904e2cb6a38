#!/usr/bin/env bash
# The utilisation harness (issue 24): one seeded, bursty multi-team workload played on three
# clusters side by side, in one run:
#
#   plain      plain Slurm: one pool, no job_submit plugin, no governor, no team limits;
#   teamshare  job_submit/teamshare and `accountd run --govern-interval 500ms`;
#   siloed     quotas as hard ceilings (each team's GrpTRES = its quota), no plugin.
#
#   contrib/bench/utilisation.sh [DIR]        DIR default /tmp/teamshare-bench-util
#   VARIANT=wholenode RUNS=3 contrib/bench/utilisation.sh
#
# VARIANT: default (3 nodes x 4 GPUs, quotas 4/4/4, borrow limit 8; 2/3 of the jobs one GPU,
# a few whole-node), wholenode (4 in 10 jobs take a whole 4-GPU node), scale (16 x 8 GPUs,
# four teams). Each run starts three fresh clusters (their ports apart), plays the workload on
# the three at once (contrib/bench/utilisation.py play: sbatch on time, squeue sampled every
# 0.25 s), reads sacct, and stops them; the summary gives every figure's median over the runs
# with its spread, and teamshare's ratios to the plain pool (definitions: utilisation.py).
# Environment: VARIANT (default), RUNS (3), SEED (1: every run plays the same workload),
# MODES ("plain teamshare siloed"), ACCOUNTD, TEAMSHARE_PLUGIN (default target/release/...),
# ports (lib.sh; each mode's moved by 100). Builds nothing. Run as root.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=${1:-/tmp/teamshare-bench-util}
VARIANT=${VARIANT:-default}
RUNS=${RUNS:-3}
SEED=${SEED:-1}
MODES=${MODES:-plain teamshare siloed}
PY=$BENCH_ROOT/contrib/bench/utilisation.py
[[ $(id -u) == 0 ]] || bench_die "run as root (the throwaway clusters run as root)"

bench_binaries "$DIR-bin"
WORKLOAD=$DIR-bin/workload-$VARIANT-$SEED.json
python3 "$PY" gen --variant "$VARIANT" --seed "$SEED" "$WORKLOAD"
read -r NODES GPUS < <(python3 -c 'import json,sys; w=json.load(open(sys.argv[1])); print(w["nodes"], w["gpus_per_node"])' "$WORKLOAD")

# The teams of the workload as teamshare.toml (the plain and siloed clusters get their
# accounts from it too).
TOML=$DIR-bin/teamshare-$VARIANT.toml
python3 - "$WORKLOAD" >"$TOML" <<'EOF'
import json, sys
w = json.load(open(sys.argv[1]))
print('[cluster]\nname = "teamshare-live"\npartitions = ["gpu"]\nidle_sharing = "fair-share"\n')
print('[gpu_types.default]\nrate_per_hour = 2.5\n')
for t in w["teams"]:
    print(f'[[team]]\nname = "{t["name"]}"\nquota = {t["quota"]}\nborrow_limit = {t["borrow_limit"]}\n')
print('[governance]\nreclaim_mode = "requeue"\nreclaim_grace = "0s"\nmin_runtime_before_reclaim = "0s"')
print('state_max_age = "5s"\non_stale_state = "fail-open"\n')
print('[accountd]\ndatabase = "accountd.db"\nstate_file = "state.json"\nsample_spool = "samples"')
print('ingest_interval = "5s"\nmetrics_listen = "127.0.0.1:29498"')
EOF

# mode_env MODE: the ports and start.sh settings of the mode's cluster.
mode_env() {
    local k=0
    case $1 in plain) k=0 ;; teamshare) k=1 ;; siloed) k=2 ;; esac
    local env=(SLURMCTLD_PORT=$((SLURMCTLD_PORT + 100 * k)) SLURMDBD_PORT=$((SLURMDBD_PORT + 100 * k))
        MARIADB_PORT=$((MARIADB_PORT + 100 * k)) SLURMD_PORT_BASE=$((SLURMD_PORT_BASE + 100 * k))
        NODES="$NODES" GPUS_PER_NODE="$GPUS" TEAMSHARE_CONFIG="$TOML" ACCOUNTD="$BIN_ACCOUNTD")
    if [[ $1 == teamshare ]]; then
        env+=(TEAMSHARE_PLUGIN="$BIN_PLUGIN")
    else
        env+=(JOB_SUBMIT_PLUGINS=none)
    fi
    printf '%s\n' "${env[@]}"
}

results=()
for ((run = 1; run <= RUNS; run++)); do
    bench_log "run $run of $RUNS ($VARIANT, seed $SEED): load $(bench_load)"
    pids=()
    for mode in $MODES; do
        d=$DIR-$mode
        rm -rf "$d"
        mapfile -t env < <(mode_env "$mode")
        bench_start "$d" "${env[@]}"
        export SLURM_CONF=$d/etc/slurm.conf
        case $mode in
        plain) # one pool: no team limits at all
            for t in $(python3 -c 'import json,sys; print(" ".join(t["name"] for t in json.load(open(sys.argv[1]))["teams"]))' "$WORKLOAD"); do
                sacctmgr -i modify account where name="$t" set GrpTRES=gres/gpu=-1 >/dev/null
            done ;;
        siloed) ;; # setup-slurm left each team's GrpTRES at its quota
        teamshare)
            "$BIN_ACCOUNTD" --config "$d/etc/teamshare.toml" run --govern-interval 500ms \
                >>"$d/log/governor.log" 2>&1 &
            bench_track $!
            until [[ -s $d/etc/state.json ]]; do sleep 0.2; done ;;
        esac
    done
    for mode in $MODES; do
        SLURM_CONF=$DIR-$mode/etc/slurm.conf python3 "$PY" play "$WORKLOAD" "$mode" \
            "$DIR-results-$VARIANT-$mode-$run.json" >"$DIR-$mode.play.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || bench_log "a player failed (see $DIR-*.play.log)"; done
    for mode in $MODES; do
        results+=("$DIR-results-$VARIANT-$mode-$run.json")
    done
    bench_kill_tracked
    for mode in $MODES; do bench_stop "$DIR-$mode"; done
done

echo
bench_machine
echo "accountd: ${ACCOUNTD:-target/release/accountd at $(git -C "$BENCH_ROOT" rev-parse --short HEAD)$(git -C "$BENCH_ROOT" diff --quiet || echo +changes)}; plugin: ${TEAMSHARE_PLUGIN:-target/release/libjob_submit_teamshare.so}"
python3 "$PY" summary "${results[@]}" | tee "$DIR-summary-$VARIANT.txt"
