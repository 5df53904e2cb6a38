#!/bin/bash
# Benchmark: reclaim latency on a live cluster. A team below its quota submits a job while the
# cluster is full of another team's borrowed jobs: how long from `sbatch` until that job RUNS
# (teamshare's plugin prices it above the victims it needs, preempt/qos requeues one victim,
# the scheduler starts the job)?
#
#   contrib/bench/reclaim-latency.sh [DIR]     DIR default /tmp/teamshare-bench-reclaim
#
# The cluster: 2 nodes x 4 GPUs, job_submit/teamshare with tests/live/teamshare.toml (agents
# quota 2, training quota 4 + borrow 4, reclaim_grace 0s, min_runtime_before_reclaim 0s,
# state_max_age 5s), and `accountd govern --interval 500ms` running (DIR/log/governor.log).
# Each trial:
#   1. 8 one-GPU `sleep 3600` jobs of training fill the cluster (4 in quota, 4 borrowed);
#   2. wait until all 8 RUN and the governor's DIR/etc/state.json lists the 4 borrowed ones as
#      victims, then 1.5 s more (the plugin re-reads the state every 250 ms);
#   3. `sbatch -A agents --gres=gpu:1` and poll squeue every 50 ms until it is RUNNING: the
#      latency is sbatch's start to the first poll that sees RUNNING;
#   4. scancel everything and wait for an empty queue.
# Prints every latency, then p50, p95, max. Environment: TRIALS (20), ACCOUNTD, TEAMSHARE_PLUGIN
# (default target/release/...), POLL (0.05 s), ports (lib.sh). Builds nothing.
#
# MODE=spread: a multi-GPU reclaim whose victims sit on both nodes. research (quota 2 + 6) fills
# the cluster with 8 one-GPU jobs (2 in quota, 6 borrowed) started one by one, a second apart,
# on n1, n2, n1, ... so the reclaim order (most recently started first) alternates between the
# nodes and no prefix of it frees 3 GPUs on one node; training (quota 4, none running) submits
# one `--gres=gpu:3` job: it needs 3 victims on one node. The preempted column lists the
# research jobs gone (expected: the 4th, 6th and 8th of the trial, on n2).
#
# MODE=typed: quotas per GPU type (issue 10), on 3 nodes (n1, n2: 4 A100 each; n3: 4 H100) with
# tests/live/teamshare-typed.toml. research fills the A100 with 6 jobs (its 2 A100 of quota and
# 4 borrowed), agents the H100 with 4 (its 2 H100 of quota and research's 2 idle H100,
# borrowed); research then takes one H100 of its quota back: exactly one of agents' borrowed
# H100 jobs must go, none of the A100 ones (the preempted column lists the jobs gone).
#
# MODE=wholenode (issue 24): an in-quota whole-node job on a full, fragmented cluster, on 3
# nodes x 4 GPUs with tests/live/teamshare-placement.toml. ops (quota 3) runs 7 one-GPU jobs,
# its four oldest on n1, two on n2, one on n3; apps (quota 4) holds its quota on n2 and n3;
# vision (quota 5) runs one job on n3. vision submits one `--gres=gpu:4` job: n1 is the only
# node it can have, by preempting all four of ops' jobs there (ops stays at its quota). The
# preempted column must list exactly those four.
#
# MODE=slices (issue 30): MIG-like slices under quotas in GPU-equivalents, on 3 nodes (each
# with one A100 cut into 7 `1g.10gb` slices, n3 with a whole A100 too) with
# tests/live/teamshare-fractional.toml. serve fills 7 slices (its A100's worth), inference 14
# (its 7 of quota and dev's 7 idle ones, borrowed); dev submits one slice of its quota:
# exactly one of inference's borrowed slices must go.
#
# MODE=shards (issue 30): the same with shares of a GPU (`gres/shard`, 4 per A100) on 2 nodes
# (2 and 1 A100, 12 shards) with tests/live/teamshare-shards.toml: serve fills 4 shards,
# inference 8 (4 borrowed); dev's one shard must take exactly one borrowed shard.
#
# MODE=wholeshards (issue 30): a whole GPU taken back from shards, on the shards cluster. Each
# A100 holds one job of 4 shards (serve's, inference's in quota, inference's borrowed); dev
# asks for a whole A100 of its quota: the borrowed shard job, and only it, must go (the
# governor's fallback requeues it: Slurm has no GPU for dev while any shard is in use).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=${1:-/tmp/teamshare-bench-reclaim}
TRIALS=${TRIALS:-20}
POLL=${POLL:-0.05}
MODE=${MODE:-single}
TOML=$BENCH_ROOT/tests/live/teamshare.toml
CLUSTER_ENV=()
if [[ $MODE == typed ]]; then
    TOML=$BENCH_ROOT/tests/live/teamshare-typed.toml
    CLUSTER_ENV=(NODES=3 "GPU_TYPES=a100 a100 h100" CLUSTER_NAME=teamshare-typed)
elif [[ $MODE == wholenode ]]; then
    TOML=$BENCH_ROOT/tests/live/teamshare-placement.toml
    CLUSTER_ENV=(NODES=3 CLUSTER_NAME=teamshare-place)
elif [[ $MODE == slices ]]; then
    TOML=$BENCH_ROOT/tests/live/teamshare-fractional.toml
    CLUSTER_ENV=(NODES=3 "GPU_TYPES=1g.10gb:7 1g.10gb:7 a100:1+1g.10gb:7" CLUSTER_NAME=teamshare-frac)
elif [[ $MODE == shards || $MODE == wholeshards ]]; then
    TOML=$BENCH_ROOT/tests/live/teamshare-shards.toml
    CLUSTER_ENV=(NODES=2 "GPU_TYPES=a100:2 a100:1" "SHARDS=4 4" CLUSTER_NAME=teamshare-shard)
fi
[[ $(id -u) == 0 ]] || bench_die "run as root (the throwaway cluster runs as root)"

bench_binaries "$DIR-bin"
bench_start "$DIR" TEAMSHARE_CONFIG="$TOML" TEAMSHARE_PLUGIN="$BIN_PLUGIN" ACCOUNTD="$BIN_ACCOUNTD" "${CLUSTER_ENV[@]}"
export SLURM_CONF=$DIR/etc/slurm.conf
STATE=$DIR/etc/state.json

"$BIN_ACCOUNTD" --config "$DIR/etc/teamshare.toml" govern --interval 500ms >>"$DIR/log/governor.log" 2>&1 &
bench_track $!

now() { echo "$EPOCHREALTIME"; }
# wait_until TIMEOUT-seconds WHAT COMMAND...: poll every 0.1 s until COMMAND succeeds
wait_until() {
    local timeout=$1 what=$2 t0
    shift 2
    t0=$SECONDS
    until "$@"; do
        ((SECONDS - t0 < timeout)) || bench_die "timed out after ${timeout}s waiting for $what"
        sleep 0.1
    done
}
state_generated_at() { sed -n 's/.*"generated_at": *\([0-9]*\).*/\1/p' "$STATE" 2>/dev/null || echo 0; }
state_fresh_after() { local g; g=$(state_generated_at); [[ -n $g ]] && ((g > $1)); }
# The victims of the whole state (a typed state lists them again per type).
victims() { python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["victims"]))' "$STATE" 2>/dev/null || echo 0; }
running() { squeue -h -A "$1" -t R -o %i | wc -l; }
queue_empty() { [[ -z $(squeue -h -o %i) ]]; }
job_running() { [[ $(squeue -h -j "$1" -o %T) == RUNNING ]]; }
case $MODE in
single) FILLER=training VICTIMS=4 CLAIMER=agents CLAIM_GRES=gpu:1 ;;
spread) FILLER=research VICTIMS=6 CLAIMER=training CLAIM_GRES=gpu:3 ;;
typed) FILLER=research VICTIMS=6 CLAIMER=research CLAIM_GRES=gpu:h100:1 ;;
wholenode) FILLER=ops VICTIMS=4 CLAIMER=vision CLAIM_GRES=gpu:4 ;;
slices) FILLER=inference VICTIMS=7 CLAIMER=dev CLAIM_GRES=gpu:1g.10gb:1 PER=7 ;;
shards) FILLER=inference VICTIMS=4 CLAIMER=dev CLAIM_GRES=shard:1 PER=4 ;;
wholeshards) FILLER=inference VICTIMS=1 CLAIMER=dev CLAIM_GRES=gpu:a100:1 FILL_GRES=shard:4 PER=1 ;;
*) bench_die "MODE is single, spread, typed, wholenode, slices, shards or wholeshards, not $MODE" ;;
esac
if [[ $MODE == wholenode ]]; then
    filled() { [[ $(running ops) -eq 7 && $(running apps) -eq 4 && $(running vision) -eq 1 && $(victims) -eq $VICTIMS ]]; }
elif [[ $MODE == typed ]]; then
    filled() { [[ $(running research) -eq 6 && $(running agents) -eq 4 && $(victims) -eq $VICTIMS ]]; }
elif [[ $MODE == slices || $MODE == shards || $MODE == wholeshards ]]; then
    filled() { [[ $(running serve) -eq $PER && $(running inference) -eq $((2 * PER)) && $(victims) -eq $VICTIMS ]]; }
else
    filled() { [[ $(running "$FILLER") -eq 8 && $(victims) -eq $VICTIMS ]]; }
fi

wait_until 30 "the governor's first state" state_fresh_after 0

SB=(--parsable -o /dev/null -e /dev/null -p gpu)
LAT=()
bench_log "$(bench_machine); load $(bench_load)"
printf '%-6s %10s %10s %10s %10s  %s\n' trial "latency s" "sbatch s" "1st victim" "preempted" "load" >"$DIR/trials.txt"
for ((t = 1; t <= TRIALS; t++)); do
    if [[ $MODE == wholenode ]]; then
        for n in n1 n1 n1 n1 n2 n2 n3; do
            sbatch "${SB[@]}" -A ops --gres=gpu:1 -w "$n" --wrap 'sleep 3600' >/dev/null
        done
        wait_until 120 "ops' 7 jobs running" bash -c "[[ \$(squeue -h -A ops -t R -o %i | wc -l) -eq 7 ]]"
        for n in n2 n2 n3 n3; do
            sbatch "${SB[@]}" -A apps --gres=gpu:1 -w "$n" --wrap 'sleep 3600' >/dev/null
        done
        sbatch "${SB[@]}" -A vision --gres=gpu:1 -w n3 --wrap 'sleep 3600' >/dev/null
    fi
    for ((i = 0; i < 8; i++)); do
        [[ $MODE == wholenode ]] && break
        if [[ $MODE == typed ]]; then
            # research: 6 A100 (2 in quota, 4 borrowed); agents: 4 H100 (2 in quota, 2
            # borrowed), the borrowed ones after the quota's.
            ((i < 6)) && sbatch "${SB[@]}" -A research --gres=gpu:a100:1 --wrap 'sleep 3600' >/dev/null
            ((i < 4)) && sbatch "${SB[@]}" -A agents --gres=gpu:h100:1 --wrap 'sleep 3600' >/dev/null
            continue
        elif [[ $MODE == slices || $MODE == shards || $MODE == wholeshards ]]; then
            # serve's PER first, then inference's PER of quota and PER borrowed.
            if ((i == 0)); then
                for team in serve inference inference; do
                    for ((k = 0; k < PER; k++)); do
                        sbatch "${SB[@]}" -A "$team" --gres="${FILL_GRES:-$CLAIM_GRES}" --wrap 'sleep 3600' >/dev/null
                    done
                    [[ $team == serve ]] && wait_until 60 "serve's $PER running" bash -c "[[ \$(squeue -h -A serve -t R -o %i | wc -l) -eq $PER ]]"
                done
            fi
            continue
        elif [[ $MODE == spread ]]; then
            j=$(sbatch "${SB[@]}" -A "$FILLER" --gres=gpu:1 -w "n$((i % 2 + 1))" --wrap 'sleep 3600')
            wait_until 60 "research job $j to run" job_running "${j%%;*}"
            sleep 1.1 # a distinct start time (Slurm's have one-second resolution)
        else
            sbatch "${SB[@]}" -A "$FILLER" --gres=gpu:1 --wrap 'sleep 3600' >/dev/null
        fi
    done
    wait_until 120 "the fillers running and $VICTIMS victims in the state" filled
    sleep 1.5
    before=$(squeue -h -t R -o %i | sort)
    first=$(grep -m1 '"job_id"' "$STATE" | tr -dc 0-9)
    t0=$(now)
    id=$(sbatch "${SB[@]}" -A "$CLAIMER" --gres="$CLAIM_GRES" --wrap 'sleep 3600')
    id=${id%%;*}
    t1=$(now)
    while [[ $(squeue -h -j "$id" -o %T 2>/dev/null) != RUNNING ]]; do
        sleep "$POLL"
        [[ $(echo "$(now) - $t0 > 120" | bc) == 0 ]] || bench_die "trial $t: job $id not running after 120 s"
    done
    t2=$(now)
    lat=$(echo "$t2 - $t0" | bc -l)
    after=$(squeue -h -t R -o %i | sort)
    victim=$(comm -23 <(echo "$before") <(echo "$after") | tr '\n' ' ')
    LAT+=("$lat")
    printf '%-6s %10.3f %10.3f %10s %10s  %s\n' "$t" "$lat" "$(echo "$t1 - $t0" | bc -l)" "$first" "${victim:--}" "$(bench_load)" | tee -a "$DIR/trials.txt" >&2
    scancel -u root
    wait_until 120 "an empty queue" queue_empty
    # A state made after the queue emptied, so the next trial starts from a clean plan.
    g=$(date +%s)
    wait_until 30 "a fresh governor pass" state_fresh_after "$g"
done

echo
bench_machine
echo "job_submit/teamshare + accountd govern --interval 500ms, $(sinfo -h -N -o '%N:%G' | sort -u | tr '\n' ' '), MODE=$MODE ($CLAIMER $CLAIM_GRES against $FILLER's $VICTIMS victims), $TRIALS trials, squeue polled every ${POLL}s"
cat "$DIR/trials.txt"
sorted=$(printf '%s\n' "${LAT[@]}")
printf 'reclaim latency (sbatch -> RUNNING): p50 %.3f s  p95 %.3f s  max %.3f s  mean %.3f s\n' \
    "$(bench_percentile 50 <<<"$sorted")" "$(bench_percentile 95 <<<"$sorted")" \
    "$(bench_percentile 100 <<<"$sorted")" \
    "$(awk '{ s += $1 } END { print s / NR }' <<<"$sorted")"
