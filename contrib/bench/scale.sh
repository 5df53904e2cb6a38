#!/usr/bin/env bash
# Scale: governance with thousands of waiting jobs under churn (issue 9).
#
#   contrib/bench/scale.sh [DIR]            DIR default /tmp/teamshare-bench-scale
#   SIZES="0 1000" WINDOW=20 TRIALS=5 contrib/bench/scale.sh    # a short check of the script
#
# A throwaway cluster of NODES x GPUS_PER_NODE fake GPUs (16 x 8 = 128) with four teams
# (alpha 48 + borrow 64, beta 40 + 64, gamma 32 + 64, reserve 8 + 0, which has no jobs of its
# own so its quota is lent). The cluster is kept full of one-GPU `sleep` jobs of alpha, beta and
# gamma, and for each size N in SIZES the queue is filled with N waiting jobs of those teams
# (one in ten of class experiment, one in ten asking for 2 GPUs, one in twenty an array of 10
# tasks). A churn loop ends CHURN running jobs a second (scancel of the oldest: their GPUs go
# to waiting jobs) and submits as many new ones, so the queue stays at N. For each size:
#
#   A1 B1 A2 B2   WINDOW seconds each; A: `accountd run --no-ingest` governing every
#                 GOVERN_INTERVAL,
#                 B: governor stopped (Slurm's own cost). Measured in A: the governor's passes
#                 (read, plan, publish: duration and Slurm calls per pass, read from its
#                 /metrics every 0.1 s, one record per pass) and its actions on plans (the
#                 same, one record per plan acted on), its full and quiet passes (DIR/quiet-N:
#                 a quiet pass found nothing moved and read no jobs), its CPU (process and children, /proc), the age of
#                 the published state (every 0.1 s); in A and B: slurmctld's CPU, the latency of
#                 an unrelated `squeue` and `sbatch --hold` (5 each per window).
#   reclaim       TRIALS times, governor running: reserve submits a one-GPU job (inside its
#                 quota, every GPU busy with borrowers); seconds from sbatch to RUNNING.
#
# MODE=native runs the same queue and churn on native Slurm (issue 26's baseline): no job_submit
# plugin, no governor, one pool (no team limits); reserve's trial jobs ask for QOS `reclaim`,
# which preempts (requeues) the borrowers' QOS `normal` and `experiment`, so slurmctld does the
# reclaim itself. Its rows have no governor figures; both windows of a round are Slurm alone.
# contrib/bench/scale-vs-native.sh runs both modes one after the other and prints the ratios.
#
# Prints one table row per size and appends it to DIR.results (the rows of docs/benchmarks.md
# section 9). Environment: MODE (teamshare; native), SIZES ("0 1000 10000"), WINDOW (30), TRIALS (20), CHURN (1),
# LATENCY_SAMPLES (5 squeue and sbatch per window, each also in DIR/latency-N),
# READS_WINDOWS (0; 1: see window_reads), NODES (16), GPUS_PER_NODE (8), GOVERN_INTERVAL (500ms: the live tests'; accountd's default
# is 1s), ACCOUNTD, TEAMSHARE_PLUGIN (default target/release/...),
# METRICS_PORT (29497), ports (lib.sh). Builds nothing. Run as root, with nothing else running.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=${1:-/tmp/teamshare-bench-scale}
SIZES=${SIZES:-0 1000 10000}
WINDOW=${WINDOW:-30}
TRIALS=${TRIALS:-20}
CHURN=${CHURN:-1}
LATENCY_SAMPLES=${LATENCY_SAMPLES:-5}
[[ $LATENCY_SAMPLES =~ ^[1-9][0-9]*$ ]] || bench_die "LATENCY_SAMPLES is a positive integer (got $LATENCY_SAMPLES)"
export NODES=${NODES:-16} GPUS_PER_NODE=${GPUS_PER_NODE:-8}
METRICS_PORT=${METRICS_PORT:-29497}
GOVERN_INTERVAL=${GOVERN_INTERVAL:-500ms}
MODE=${MODE:-teamshare}
[[ $MODE == teamshare || $MODE == native ]] || bench_die "MODE is teamshare or native (got $MODE)"
[[ $(id -u) == 0 ]] || bench_die "run as root (the throwaway cluster runs as root)"
command -v curl >/dev/null || bench_die "curl is needed (apt-get install curl) to read the governor's /metrics"
CAPACITY=$((NODES * GPUS_PER_NODE))
((CAPACITY == 128)) || bench_log "note: the team quotas are sized for 128 GPUs; this cluster has $CAPACITY"

bench_binaries "$DIR-bin"
TOML=$DIR-bin/teamshare.toml
cat >"$TOML" <<EOF
[cluster]
name = "teamshare-live"
partitions = ["gpu"]
idle_sharing = "fair-share"

[gpu_types.default]
rate_per_hour = 2.5

[[team]]
name = "alpha"
quota = 48
borrow_limit = 64
weight = 40

[[team]]
name = "beta"
quota = 40
borrow_limit = 64
weight = 30

[[team]]
name = "gamma"
quota = 32
borrow_limit = 64
weight = 20

[[team]]
name = "reserve"
quota = 8
borrow_limit = 0
weight = 10

[[priority_class]]
name = "inference"
value = 100
preemptible = false

[[priority_class]]
name = "standard"
value = 50

[[priority_class]]
name = "experiment"
value = 10

[governance]
reclaim_mode = "requeue"
reclaim_grace = "0s"
min_runtime_before_reclaim = "0s"
state_max_age = "5s"
on_stale_state = "fail-open"

[accountd]
database = "accountd.db"
state_file = "state.json"
sample_spool = "samples"
metrics_listen = "127.0.0.1:$METRICS_PORT"
EOF

# Slurm's default MaxJobCount (10,000) would refuse the largest size's submissions.
echo "MaxJobCount=100000" >"$DIR-bin/slurm.conf.extra"
if [[ $MODE == native ]]; then
    bench_start "$DIR" TEAMSHARE_CONFIG="$TOML" JOB_SUBMIT_PLUGINS=none ACCOUNTD="$BIN_ACCOUNTD" \
        SLURM_CONF_EXTRA="$DIR-bin/slurm.conf.extra"
else
    bench_start "$DIR" TEAMSHARE_CONFIG="$TOML" TEAMSHARE_PLUGIN="$BIN_PLUGIN" ACCOUNTD="$BIN_ACCOUNTD" \
        SLURM_CONF_EXTRA="$DIR-bin/slurm.conf.extra"
fi
export SLURM_CONF=$DIR/etc/slurm.conf
RECLAIM_QOS=()
if [[ $MODE == native ]]; then
    # One pool (setup-slurm left each team's GrpTRES at its quota); the workload's class is a
    # plain QOS; reserve's jobs reclaim through a QOS that preempts the others.
    sacctmgr -i modify account where name=alpha,beta,gamma,reserve set GrpTRES=gres/gpu=-1 >/dev/null
    sacctmgr -i add qos experiment,reclaim >/dev/null
    sacctmgr -i modify qos where name=reclaim set Preempt=normal,experiment PreemptMode=requeue Priority=1000 >/dev/null
    sacctmgr -i modify account where name=alpha,beta,gamma,reserve set qos+=experiment,reclaim >/dev/null
    RECLAIM_QOS=(--qos=reclaim)
fi
STATE=$DIR/etc/state.json
CTLD_PID=$(cat "$DIR/pids/slurmctld.pid")
CLK=$(getconf CLK_TCK)
SB=(--parsable -o /dev/null -e /dev/null -p gpu)
TEAMS=(alpha beta gamma)

GOV_PID=
start_governor() {
    [[ $MODE == teamshare ]] || return 0
    "$BIN_ACCOUNTD" --config "$DIR/etc/teamshare.toml" run --no-ingest --govern-interval "$GOVERN_INTERVAL" \
        >>"$DIR/log/governor.log" 2>&1 &
    GOV_PID=$!
    bench_track "$GOV_PID"
    local t0=$SECONDS
    until curl -fs "http://127.0.0.1:$METRICS_PORT/metrics" | grep -q '^teamshare_governor_passes_total'; do
        ((SECONDS - t0 < 60)) || bench_die "the governor made no pass in 60 s (see $DIR/log/governor.log)"
        sleep 0.2
    done
}
stop_governor() {
    [[ -n $GOV_PID ]] || return 0
    kill "$GOV_PID" 2>/dev/null || true
    wait "$GOV_PID" 2>/dev/null || true
    GOV_PID=
}

# utime + stime (+ children's when $2 is set) of a process, in clock ticks.
cpu_ticks() { # pid [children]
    awk -v c="${2:-}" '{ sub(/^.*\) /, ""); t = $12 + $13; if (c != "") t += $14 + $15; print t }' "/proc/$1/stat"
}
# Median of numbers on stdin.
median() { bench_percentile 50; }
now() { echo "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }

# One job of the workload: team, class and shape drawn from the job's number.
submit_one() { # n [extra sbatch args...]
    local n=$1 team args
    shift
    team=${TEAMS[$((n % 3))]}
    args=(-A "$team")
    ((n % 10 == 3)) && args+=(--qos=experiment)
    if ((n % 20 == 7)); then
        args+=(--gres=gpu:1 --array=1-10)
    elif ((n % 10 == 5)); then
        args+=(--gres=gpu:2)
    else
        args+=(--gres=gpu:1)
    fi
    sbatch "${SB[@]}" "${args[@]}" "$@" --wrap 'sleep 36000' >/dev/null 2>>"$DIR/submit-errors.log" || true
}

pending_count() { squeue -h -t PD -p gpu -o %i | wc -l; }
running_count() { squeue -h -t R -p gpu -o %i | wc -l; }
# Jobs holding GPUs: running, and ending (the churn keeps one or more completing at any time,
# so "every GPU busy" is running + completing).
busy_count() { squeue -h -t R,CG -p gpu -o %i | wc -l; }

# Keep the cluster full: one-GPU jobs of alpha, beta and gamma until every GPU runs.
fill_running() {
    local i=0
    while (($(running_count) < CAPACITY)); do
        for ((k = 0; k < 16; k++)); do
            sbatch "${SB[@]}" -A "${TEAMS[$((i % 3))]}" --gres=gpu:1 --wrap 'sleep 36000' >/dev/null || true
            i=$((i + 1))
        done
        sleep 1
        ((i < 4 * CAPACITY)) || bench_die "cannot fill the cluster (running $(running_count) of $CAPACITY)"
    done
}

# Fill the queue up to N waiting records, 4 submitters at a time.
SEQ=0
fill_queue() { # n
    local want=$1 have
    have=$(pending_count)
    ((have < want)) || return 0
    bench_log "submitting $((want - have)) waiting jobs"
    local first=$SEQ
    SEQ=$((SEQ + want - have))
    seq "$first" $((SEQ - 1)) | SB_DIR=$DIR xargs -P 4 -n 50 bash -c '
        for n in "$@"; do
            team=(alpha beta gamma); t=${team[$((n % 3))]}
            a=(-A "$t"); ((n % 10 == 3)) && a+=(--qos=experiment)
            if ((n % 20 == 7)); then a+=(--gres=gpu:1 --array=1-10)
            elif ((n % 10 == 5)); then a+=(--gres=gpu:2)
            else a+=(--gres=gpu:1); fi
            sbatch --parsable -o /dev/null -e /dev/null -p gpu "${a[@]}" --wrap "sleep 36000" >/dev/null 2>>"$SB_DIR/submit-errors.log" || true
        done' _
}

CHURN_PID=
start_churn() { # n
    local n=$1
    (
        while true; do
            # The oldest running jobs end; as many new ones wait at the back.
            mapfile -t ids < <(squeue -h -t R -p gpu --sort=S -o %i | head -n "$CHURN")
            ((${#ids[@]})) && scancel "${ids[@]}" 2>/dev/null || true
            for ((k = 0; k < CHURN; k++)); do
                SEQ=$((SEQ + 1))
                submit_one "$SEQ"
            done
            # Now and then a waiting job is cancelled by its owner.
            if ((RANDOM % 5 == 0)); then
                id=$(squeue -h -t PD -p gpu -o %i | shuf -n 1 2>/dev/null || true)
                [[ -n $id ]] && scancel "${id%%_*}" 2>/dev/null || true
            fi
            sleep 1
        done
    ) &
    CHURN_PID=$!
    bench_track "$CHURN_PID"
}
stop_churn() {
    [[ -n $CHURN_PID ]] || return 0
    kill "$CHURN_PID" 2>/dev/null || true
    wait "$CHURN_PID" 2>/dev/null || true
    CHURN_PID=
}

# Latency of an unrelated squeue and sbatch --hold, LATENCY_SAMPLES each; prints
# "squeue_median sbatch_median" and appends every sample ("LABEL squeue_s sbatch_s") to
# $DIR/latency-N, so that runs can be pooled.
client_latency() { # label
    local q=() s=() t id
    for ((k = 0; k < LATENCY_SAMPLES; k++)); do
        t=$(now)
        squeue -h >/dev/null
        q+=("$(elapsed "$t")")
        t=$(now)
        id=$(sbatch "${SB[@]}" --hold -A gamma --gres=gpu:1 --wrap 'sleep 1' 2>/dev/null || true)
        s+=("$(elapsed "$t")")
        [[ -n $id ]] && scancel "$id" 2>/dev/null || true
        echo "$1 ${q[-1]} ${s[-1]}" >>"$DIR/latency-$n"
        sleep 0.5
    done
    echo "$(printf '%s\n' "${q[@]}" | median) $(printf '%s\n' "${s[@]}" | median)"
}

# A window with the governor running: appends pass records to $DIR/passes-N and state ages
# to $DIR/ages-N; prints "gov_cpu_fraction ctld_cpu_fraction squeue_s sbatch_s".
window_governed() { # n
    local n=$1 g0 c0 t0 lat last=-1 last_act=-1 line passes secs calls acts gen mtime age quiet
    g0=$(cpu_ticks "$GOV_PID" children)
    c0=$(cpu_ticks "$CTLD_PID")
    t0=$(now)
    (
        end=$((SECONDS + WINDOW))
        while ((SECONDS < end)); do
            m=$(curl -fs --max-time 2 "http://127.0.0.1:$METRICS_PORT/metrics" || true)
            passes=$(awk '/^teamshare_governor_passes_total /{print $2}' <<<"$m")
            secs=$(awk '/^teamshare_governor_last_pass_seconds /{print $2}' <<<"$m")
            calls=$(awk '/^teamshare_governor_last_pass_slurm_calls /{print $2}' <<<"$m")
            if [[ -n $passes && $passes != "$last" ]]; then
                echo "$passes $secs $calls" >>"$DIR/passes-$n"
                last=$passes
            fi
            quiet=$(awk '/^teamshare_governor_quiet_passes_total /{print $2}' <<<"$m")
            [[ -n $passes ]] && echo "$passes ${quiet:-0}" >>"$DIR/quiet-$n.$$"
            acts=$(awk '/^teamshare_governor_acts_total /{print $2}' <<<"$m")
            if [[ -n $acts && $acts != "$last_act" ]]; then
                echo "$acts $(awk '/^teamshare_governor_last_act_seconds /{print $2}' <<<"$m") $(awk '/^teamshare_governor_last_act_slurm_calls /{print $2}' <<<"$m")" >>"$DIR/acts-$n"
                last_act=$acts
            fi
            gen=$(sed -n 's/.*"generated_at": *\([0-9]*\).*/\1/p' "$STATE" 2>/dev/null)
            mtime=$(stat -c %Y "$STATE" 2>/dev/null || echo 0)
            [[ -n $gen ]] && echo "$(($(date +%s) - gen)) $(($(date +%s) - mtime))" >>"$DIR/ages-$n"
            sleep 0.1
        done
    ) &
    local sampler=$!
    bench_track "$sampler"
    sleep 2
    lat=$(client_latency governed)
    wait "$sampler" || true
    # Full and quiet passes in the window (quiet: nothing moved, no jobs read; see
    # accountd/src/governor/quiet.rs), one line per window in $DIR/quiet-N.
    awk 'NR == 1 { p0 = $1; q0 = $2 } { p = $1; q = $2 } END { if (NR) print p - p0, q - q0 }' \
        "$DIR"/quiet-"$n".* >>"$DIR/quiet-$n" 2>/dev/null || true
    rm -f "$DIR"/quiet-"$n".*
    local secs_spent
    secs_spent=$(elapsed "$t0")
    awk -v g0="$g0" -v g1="$(cpu_ticks "$GOV_PID" children)" -v c0="$c0" -v c1="$(cpu_ticks "$CTLD_PID")" \
        -v s="$secs_spent" -v clk="$CLK" -v lat="$lat" \
        'BEGIN { printf "%.4f %.4f %s\n", (g1 - g0) / clk / s, (c1 - c0) / clk / s, lat }'
}

# A window with the governor stopped; prints "ctld_cpu_fraction squeue_s sbatch_s".
window_stopped() {
    local c0 t0 lat
    c0=$(cpu_ticks "$CTLD_PID")
    t0=$(now)
    sleep 2
    lat=$(client_latency stopped)
    local rest
    rest=$(awk -v w="$WINDOW" -v e="$(elapsed "$t0")" 'BEGIN { r = w - e; print (r > 0 ? r : 0) }')
    sleep "$rest"
    awk -v c0="$c0" -v c1="$(cpu_ticks "$CTLD_PID")" -v s="$(elapsed "$t0")" -v clk="$CLK" -v lat="$lat" \
        'BEGIN { printf "%.4f %s\n", (c1 - c0) / clk / s, lat }'
}

# READS_WINDOWS=1: a third window per round, the governor stopped and only its reads going on
# (`accountd govern --dry-run` every GOVERN_INTERVAL: a pass's RPCs and plan, no action), to
# tell slurmctld's cost of the governor's reads from that of its writes. Prints
# "ctld_cpu_fraction reads".
window_reads() {
    local c0 t0 end pause k=0
    case $GOVERN_INTERVAL in
    *ms) pause=$(awk -v m="${GOVERN_INTERVAL%ms}" 'BEGIN { print m / 1000 }') ;;
    *s) pause=${GOVERN_INTERVAL%s} ;;
    *) pause=$GOVERN_INTERVAL ;;
    esac
    c0=$(cpu_ticks "$CTLD_PID")
    t0=$(now)
    end=$((SECONDS + WINDOW))
    while ((SECONDS < end)); do
        "$BIN_ACCOUNTD" --config "$DIR/etc/teamshare.toml" govern --dry-run >/dev/null 2>&1 || true
        k=$((k + 1))
        sleep "$pause"
    done
    awk -v c0="$c0" -v c1="$(cpu_ticks "$CTLD_PID")" -v s="$(elapsed "$t0")" -v clk="$CLK" -v k="$k" \
        'BEGIN { printf "%.4f %d\n", (c1 - c0) / clk / s, k }'
}

# Reclaim latency: reserve's one-GPU job while borrowers hold the cluster; prints every
# latency. Under churn the cluster is rarely full to the last GPU (an ended job's GPU waits a
# pass and a scheduling cycle for the next borrower): a trial waits up to 30 s for every GPU
# to be busy, then goes ahead, and the GPUs free at its sbatch are logged (DIR/reclaim-N: 0 is
# a reclaim proper, more is a start on a free GPU).
reclaim_trials() { # n
    local t id t0 lat=() free
    for ((t = 1; t <= TRIALS; t++)); do
        local w0=$SECONDS
        until (($(busy_count) >= CAPACITY)) || ((SECONDS - w0 >= 30)); do
            sleep 0.2
        done
        free=$((CAPACITY - $(busy_count)))
        t0=$(now)
        id=$(sbatch "${SB[@]}" -A reserve "${RECLAIM_QOS[@]}" --gres=gpu:1 --wrap 'sleep 36000')
        until [[ $(squeue -h -j "$id" -o %T 2>/dev/null) == RUNNING ]]; do
            awk -v a="$t0" -v b="$(now)" 'BEGIN { exit !(b - a > 120) }' && bench_die "reserve job $id did not run within 120 s"
            sleep 0.05
        done
        lat+=("$(elapsed "$t0")")
        echo "$t ${lat[-1]} free=$free" >>"$DIR/reclaim-$1"
        scancel "$id"
    done
    printf '%s\n' "${lat[@]}"
}

stats() { # file column -> "p50 p95 max"
    local col=$2
    if [[ ! -s $1 ]]; then
        echo "- - -"
        return
    fi
    echo "$(awk -v c="$col" '{print $c}' "$1" | bench_percentile 50) $(awk -v c="$col" '{print $c}' "$1" | bench_percentile 95) $(awk -v c="$col" '{print $c}' "$1" | sort -n | tail -1)"
}

COMMIT=$(git -C "$BENCH_ROOT" rev-parse --short HEAD)
git -C "$BENCH_ROOT" diff --quiet HEAD -- accountd plugin config 2>/dev/null || COMMIT="$COMMIT+changes"
bench_log "$(bench_machine); $NODES x $GPUS_PER_NODE GPUs; load $(bench_load)"
start_governor
bench_log "filling the cluster's $CAPACITY GPUs"
fill_running
RESULTS=$DIR.results
printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' \
    "waiting" "pass p50/p95/max s" "calls/pass p50/max" "act p50/p95/max s, calls p50/max" "governor CPU" "slurmctld CPU on/off" \
    "state age max s" "squeue on/off s" "sbatch on/off s" "reclaim p50/p95/max s" "commit" "load" "date" >>"$RESULTS"
for n in $SIZES; do
    rm -f "$DIR/passes-$n" "$DIR/acts-$n" "$DIR/ages-$n" "$DIR/latency-$n" "$DIR/quiet-$n"
    stop_churn
    fill_queue "$n"
    bench_log "size $n: $(pending_count) waiting records; churn $CHURN/s"
    start_churn "$n"
    sleep 10
    A=() B=()
    for round in 1 2; do
        if [[ $MODE == native ]]; then
            A+=("- $(window_stopped)")
        else
            [[ -n $GOV_PID ]] || start_governor
            A+=("$(window_governed "$n")")
        fi
        stop_governor
        B+=("$(window_stopped)")
        bench_log "size $n round $round: governed ${A[-1]}; stopped ${B[-1]}; full and quiet passes: $(tail -1 "$DIR/quiet-$n" 2>/dev/null)"
        if [[ ${READS_WINDOWS:-0} == 1 ]]; then
            bench_log "size $n round $round: reads only (slurmctld CPU, reads): $(window_reads)"
        fi
    done
    start_governor
    rm -f "$DIR/reclaim-$n"
    mapfile -t REC < <(reclaim_trials "$n")
    stop_churn
    gov_cpu=-
    [[ $MODE == native ]] || gov_cpu=$(printf '%s\n' "${A[@]}" | awk '{ s += $1 } END { printf "%.1f%%", 100 * s / NR }')
    ctld_on=$(printf '%s\n' "${A[@]}" | awk '{ s += $2 } END { printf "%.1f%%", 100 * s / NR }')
    ctld_off=$(printf '%s\n' "${B[@]}" | awk '{ s += $1 } END { printf "%.1f%%", 100 * s / NR }')
    q_on=$(printf '%s\n' "${A[@]}" | awk '{ print $3 }' | median)
    q_off=$(printf '%s\n' "${B[@]}" | awk '{ print $2 }' | median)
    s_on=$(printf '%s\n' "${A[@]}" | awk '{ print $4 }' | median)
    s_off=$(printf '%s\n' "${B[@]}" | awk '{ print $3 }' | median)
    read -r p50 p95 pmax <<<"$(stats "$DIR/passes-$n" 2)"
    read -r c50 _ cmax <<<"$(stats "$DIR/passes-$n" 3)"
    read -r a50 a95 amax <<<"$(stats "$DIR/acts-$n" 2)"
    read -r ac50 _ acmax <<<"$(stats "$DIR/acts-$n" 3)"
    age_max=$(awk '{ if ($1 > m) m = $1 } END { print m + 0 }' "$DIR/ages-$n" 2>/dev/null || echo -)
    r50=$(printf '%s\n' "${REC[@]}" | bench_percentile 50)
    r95=$(printf '%s\n' "${REC[@]}" | bench_percentile 95)
    rmax=$(printf '%s\n' "${REC[@]}" | sort -n | tail -1)
    row=$(printf '| %s | %s / %s / %s | %s / %s | %s / %s / %s, %s / %s | %s | %s / %s | %s | %s / %s | %s / %s | %s / %s / %s | %s | %s | %s |' \
        "$n" "$p50" "$p95" "$pmax" "$c50" "$cmax" "$a50" "$a95" "$amax" "$ac50" "$acmax" "$gov_cpu" "$ctld_on" "$ctld_off" "$age_max" \
        "$q_on" "$q_off" "$s_on" "$s_off" "$r50" "$r95" "$rmax" "$COMMIT $MODE" "$(bench_load)" "$(date -u +%F)")
    echo "$row" | tee -a "$RESULTS"
done
stop_churn
stop_governor
bench_log "rows in $RESULTS; pass records in $DIR/passes-N"
