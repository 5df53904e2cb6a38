#!/bin/bash
# Benchmark: what a job_submit plugin costs at submit, side by side in one run:
#   none       no job_submit plugin (no JobSubmitPlugins line)
#   teamshare  job_submit/teamshare (target/release/libjob_submit_teamshare.so)
#   lua        job_submit/lua running contrib/bench/job_submit.lua (the same team checks)
#
#   contrib/bench/submit-overhead.sh [BASE]      clusters at BASE-<config>, default
#                                                /tmp/teamshare-bench-submit-<config>
#
# The three clusters run at the same time (same accounts and QOS: teamshare.toml of the live
# tests and `accountd setup-slurm`; ports of lib.sh + 0, 10, 20) and the submissions are
# interleaved in blocks of BLOCK jobs (none, teamshare, lua, then the next block starting with the
# next configuration), so that whatever else the machine does slows all three alike:
#   seq   JOBS sequential `sbatch -A agents -p gpu --gres=gpu:1 --begin=now+1hour --wrap true`
#         per configuration (the begin time keeps them pending: nothing runs);
#   par   JOBS more per configuration, each block from PAR parallel submitters;
#   perf  (PERF=1, the default when perf is installed) JOBS more per configuration, one
#         configuration at a time, while `perf record` samples its slurmctld: the share of
#         slurmctld's samples inside the plugin's code (its .so; for lua also liblua) times
#         slurmctld's CPU time is the plugin's own CPU per submit.
# Reported per configuration and mode: jobs/s (and % of none, from the totals and as the median
# of the per-block ratios), slurmctld's mean time per REQUEST_SUBMIT_BATCH_JOB from sdiag (the
# whole RPC handler, job_submit plugin included), the usec= of slurmctld's
# `_slurm_rpc_submit_batch_job: JobId=N InitPrio=P usec=U` log line (22.05 restarts that timer
# after the job_submit plugin ran: it times job_allocate only, not the plugin), slurmctld's CPU.
#
# TYPED=1: quotas per GPU type (issue 10): tests/live/teamshare-typed.toml on 3 nodes (4 A100,
# 4 A100, 4 H100) and `--gres=gpu:h100:1`, so the plugin takes its per-type path.
#
# Environment: JOBS (1000), BLOCK (40), PAR (4), PERF, CONFIGS ("none teamshare lua"), TYPED, ACCOUNTD,
# TEAMSHARE_PLUGIN (default target/release/...), ports (lib.sh). Builds nothing: run
# `cargo build --release` first. Needs root (the clusters run as root).
#
# teamshare's plugin reads the governor's state file: it is published once with
# `accountd govern --once` and then kept fresh (generated_at rewritten every second), for every
# cluster alike, so that the plugin takes its normal path (fresh state) without governor passes
# competing for the CPUs (a governor would re-prioritise the growing queue on every pass).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BASE=${1:-/tmp/teamshare-bench-submit}
JOBS=${JOBS:-1000}
BLOCK=${BLOCK:-40}
PAR=${PAR:-4}
PERF=${PERF:-$(command -v perf >/dev/null && echo 1 || echo 0)}
read -r -a CFGS <<<"${CONFIGS:-none teamshare lua}"
WARMUP=${WARMUP:-20}
TOML=$BENCH_ROOT/tests/live/teamshare.toml
GRES=gpu:1
CLUSTER_ENV=()
if [[ ${TYPED:-0} == 1 ]]; then
    TOML=$BENCH_ROOT/tests/live/teamshare-typed.toml
    GRES=gpu:h100:1
    CLUSTER_ENV=(NODES=3 "GPU_TYPES=a100 a100 h100" CLUSTER_NAME=teamshare-typed)
fi
LUA=$BENCH_ROOT/contrib/bench/job_submit.lua
((JOBS % BLOCK == 0)) || bench_die "JOBS ($JOBS) must be a multiple of BLOCK ($BLOCK)"
((BLOCK % PAR == 0)) || bench_die "BLOCK ($BLOCK) must be a multiple of PAR ($PAR)"
[[ $(id -u) == 0 ]] || bench_die "run as root (the throwaway clusters run as root)"
unset SLURM_CONF

mkdir -p "$(dirname "$BASE")"
bench_binaries "$BASE-bin"
OUT=$BASE-results
rm -rf "$OUT"
mkdir -p "$OUT"

SB_ARGS=(--parsable -o /dev/null -e /dev/null -A agents -p gpu --gres=$GRES --begin=now+1hour --wrap true)

conf() { echo "$BASE-$1/etc/slurm.conf"; }

submit_loop() { # cfg n ids-file
    local i out c
    c=$(conf "$1")
    for ((i = 0; i < $2; i++)); do
        if out=$(SLURM_CONF=$c sbatch "${SB_ARGS[@]}" 2>&1); then
            echo "${out%%;*}" >>"$3"
        else
            echo "sbatch ($1) failed: $out" >&2
        fi
    done
}

submit_block() { # cfg n ids-file mode
    if [[ $4 == par ]]; then
        local p pids=()
        for ((p = 0; p < PAR; p++)); do
            submit_loop "$1" $(($2 / PAR)) "$3.$p" &
            pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p"; done
        cat "$3".* >>"$3"
        rm -f "$3".*
    else
        submit_loop "$1" "$2" "$3"
    fi
}

keep_state_fresh() { # state-file: rewrite generated_at every second (see above)
    local f=$1
    while :; do
        sed -E "s/\"generated_at\": *[0-9]+/\"generated_at\": $(date +%s)/" "$f" >"$f.bench" && mv "$f.bench" "$f"
        sleep 1
    done
}

ctld_pid() { cat "$BASE-$1/pids/slurmctld.pid"; }
ctld_cpu_ms() { # cfg: slurmctld's utime+stime so far, in ms
    local stat
    stat=$(cat "/proc/$(ctld_pid "$1")/stat")
    stat=${stat##*) }
    awk -v tck="$(getconf CLK_TCK)" '{ printf "%.0f", ($12 + $13) * 1000 / tck }' <<<"$stat"
}

sdiag_submit() { # cfg -> "count ave_time_us"
    SLURM_CONF=$(conf "$1") sdiag 2>/dev/null | awk '/REQUEST_SUBMIT_BATCH_JOB/ {
        for (i = 1; i <= NF; i++) { split($i, kv, ":"); if (kv[1] == "count") c = kv[2]; if (kv[1] == "ave_time") a = kv[2] }
        print c, a; found = 1; exit } END { if (!found) print "0 -" }'
}

log_usecs() { # log offset ids-file -> one usec per line, for those job ids
    tail -c +"$(($2 + 1))" "$1" | awk -v ids="$3" '
        BEGIN { while ((getline l < ids) > 0) want[l] = 1 }
        /_slurm_rpc_submit_batch_job: JobId=/ {
            id = ""; us = ""
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^JobId=/) id = substr($i, 7)
                if ($i ~ /^usec=/) us = substr($i, 6)
            }
            if (id in want && us != "") print us
        }'
}

# ------------------------------------------------------------------ clusters
bench_log "$(bench_machine)"
bench_log "load at start: $(bench_load)"
i=0
for cfg in "${CFGS[@]}"; do
    envs=(TEAMSHARE_CONFIG="$TOML" ACCOUNTD="$BIN_ACCOUNTD" "${CLUSTER_ENV[@]}"
        SLURMCTLD_PORT=$((SLURMCTLD_PORT + 10 * i)) SLURMDBD_PORT=$((SLURMDBD_PORT + 10 * i))
        MARIADB_PORT=$((MARIADB_PORT + 10 * i)) SLURMD_PORT_BASE=$((SLURMD_PORT_BASE + 10 * i)))
    case $cfg in
        none) envs+=(JOB_SUBMIT_PLUGINS=none) ;;
        teamshare) envs+=(TEAMSHARE_PLUGIN="$BIN_PLUGIN" JOB_SUBMIT_PLUGINS=teamshare) ;;
        lua) envs+=(JOB_SUBMIT_PLUGINS=lua JOB_SUBMIT_LUA="$LUA") ;;
        *) bench_die "unknown configuration $cfg" ;;
    esac
    bench_start "$BASE-$cfg" "${envs[@]}"
    i=$((i + 1))
done
for cfg in "${CFGS[@]}"; do
    c=$(conf "$cfg")
    bench_log "$cfg: $(grep '^JobSubmitPlugins' "$c" || echo 'no JobSubmitPlugins line'), slurmctld port $(sed -n 's/^SlurmctldPort=//p' "$c")"
    SLURM_CONF=$c "$BIN_ACCOUNTD" --config "$BASE-$cfg/etc/teamshare.toml" govern --once >"$BASE-$cfg/log/governor.log" 2>&1 ||
        bench_die "accountd govern --once ($cfg) failed: $(tail -3 "$BASE-$cfg/log/governor.log")"
    keep_state_fresh "$BASE-$cfg/etc/state.json" &
    bench_track $!
    # What each configuration answers to a request over agents' ceiling (quota 2 + borrow 2).
    said=$(SLURM_CONF=$c sbatch --parsable -o /dev/null -A agents -p gpu --gpus=6 --begin=now+1hour --wrap true 2>&1) || true
    echo "$cfg: ${said//$'\n'/ | }" >>"$OUT/refusals.txt"
    SLURM_CONF=$c scancel -u root 2>/dev/null || true
    submit_loop "$cfg" "$WARMUP" "$OUT/warmup-$cfg.txt"
done

# ------------------------------------------------------------- interleaved
run_mode() { # seq|par
    local mode=$1 cfg b k n
    local -A off cpu0
    for cfg in "${CFGS[@]}"; do
        : >"$OUT/ids-$mode-$cfg.txt"
        SLURM_CONF=$(conf "$cfg") sdiag -r >/dev/null
        off[$cfg]=$(stat -c %s "$BASE-$cfg/log/slurmctld.log")
        cpu0[$cfg]=$(ctld_cpu_ms "$cfg")
    done
    local load0
    load0=$(bench_load)
    n=${#CFGS[@]}
    for ((b = 0; b < JOBS / BLOCK; b++)); do
        for ((k = 0; k < n; k++)); do
            cfg=${CFGS[$(((b + k) % n))]}
            local t0=$EPOCHREALTIME
            submit_block "$cfg" "$BLOCK" "$OUT/ids-$mode-$cfg.txt" "$mode"
            echo "$b $cfg $(echo "$EPOCHREALTIME - $t0" | bc -l)" >>"$OUT/blocks-$mode.txt"
        done
    done
    sleep 1 # slurmctld may log the last lines a moment after answering
    for cfg in "${CFGS[@]}"; do
        local ids=$OUT/ids-$mode-$cfg.txt usecs sd
        sd=$(sdiag_submit "$cfg")
        usecs=$(log_usecs "$BASE-$cfg/log/slurmctld.log" "${off[$cfg]}" "$ids")
        local c0=${cpu0[$cfg]}
        printf '%s %s %s %s %s %s %s %s %s\n' "$mode" "$cfg" "$(grep -c '^[0-9]' "$ids" || true)" \
            "${sd#* }" "$(bench_percentile 50 <<<"$usecs")" "$(bench_percentile 95 <<<"$usecs")" \
            "$(awk '{ s += $1 } END { if (NR) printf "%.0f", s / NR; else print "-" }' <<<"$usecs")" \
            "$(($(ctld_cpu_ms "$cfg") - c0))" "${load0%% *}" >>"$OUT/rpc.txt"
    done
    bench_log "$mode done: load $(bench_load)"
}
run_mode seq
run_mode par

# ------------------------------------------------------------------- perf
if [[ $PERF == 1 ]]; then
    for cfg in "${CFGS[@]}"; do
        perf record -F 4999 -p "$(ctld_pid "$cfg")" -o "$OUT/perf-$cfg.data" >"$OUT/perf-$cfg.log" 2>&1 &
        perf_pid=$!
        sleep 0.5
        pcpu0=$(ctld_cpu_ms "$cfg")
        submit_loop "$cfg" "$JOBS" "$OUT/ids-perf-$cfg.txt"
        pcpu1=$(ctld_cpu_ms "$cfg")
        kill -INT "$perf_pid"
        wait "$perf_pid" || true
        perf report -n -i "$OUT/perf-$cfg.data" --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9.]+%' >"$OUT/perf-dso-$cfg.txt" || true
        read -r samples plugin share < <(awk -v cfg="$cfg" '{ n += $2
                if ((cfg == "teamshare" && $3 ~ /job_submit_teamshare/) || (cfg == "lua" && ($3 ~ /job_submit_lua/ || $3 ~ /liblua/))) s += $2 }
            END { printf "%d %d %.3f\n", n, s, n ? 100 * s / n : 0 }' "$OUT/perf-dso-$cfg.txt")
        us=$(echo "$share / 100 * ($pcpu1 - $pcpu0) * 1000 / $JOBS" | bc -l)
        printf '%s %s %s %s %s %.2f\n' "$cfg" "$samples" "$plugin" "$share" "$((pcpu1 - pcpu0))" "$us" >>"$OUT/perf.txt"
        bench_log "$cfg perf: $plugin of $samples slurmctld samples in the plugin's code, slurmctld CPU $((pcpu1 - pcpu0)) ms / $JOBS submits"
    done
fi

# ------------------------------------------------------------------ report
echo
bench_machine
echo "3 clusters side by side (2 nodes x 4 GPUs each); per configuration $JOBS jobs per mode, interleaved in blocks of $BLOCK; par = $PAR submitters"
echo "sbatch ${SB_ARGS[*]}"
echo
printf '%-10s %-4s %6s %8s %8s %8s %16s %10s %9s %9s %9s %9s %5s\n' config mode jobs "wall s" jobs/s "% none" "block ratio" "sdiag" "log p50" "log p95" "log mean" "ctld CPU" load
printf '%-10s %-4s %6s %8s %8s %8s %16s %10s %9s %9s %9s %9s %5s\n' "" "" "" "" "" "" "median [p25-p75]" "us/RPC" usec usec usec ms ""
for mode in seq par; do
    awk -v mode="$mode" -v rpc="$OUT/rpc.txt" '
        function sortn(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } }
        function pct(a, n, p,   r) { r = int(p / 100 * (n - 1) + 0.5) + 1; return a[r] }
        { t[$1, $2] = $3; tot[$2] += $3; if (!($2 in seen)) { seen[$2] = 1; cfgs[++nc] = $2 }; if ($1 + 1 > nb) nb = $1 + 1 }
        END {
            while ((getline l < rpc) > 0) { split(l, f, " "); if (f[1] == mode) r[f[2]] = l }
            for (c = 1; c <= nc; c++) {
                cfg = cfgs[c]; n = 0
                for (b = 0; b < nb; b++) if (((b, cfg) in t) && ((b, "none") in t)) ratios[++n] = 100 * t[b, "none"] / t[b, cfg]
                sortn(ratios, n)
                split(r[cfg], f, " ")
                jobs = f[3]
                printf "%-10s %-4s %6s %8.2f %8.1f %8.1f %16s %10s %9s %9s %9s %9s %5s\n", cfg, mode, jobs, tot[cfg], jobs / tot[cfg],
                    ("none" in tot) ? 100 * tot["none"] / tot[cfg] : 0,
                    (n ? sprintf("%.1f [%.1f-%.1f]", pct(ratios, n, 50), pct(ratios, n, 25), pct(ratios, n, 75)) : "-"),
                    f[4], f[5], f[6], f[7], f[8], f[9]
                delete ratios
            }
        }' "$OUT/blocks-$mode.txt"
done
if [[ -s $OUT/perf.txt ]]; then
    echo
    echo "the plugin's own CPU per submit: share of slurmctld's perf samples in the plugin's code x slurmctld's CPU time"
    printf '%-10s %9s %10s %12s %14s %12s\n' config samples "in plugin" "% in plugin" "ctld CPU ms" "us/submit"
    awk '{ printf "%-10s %9s %10s %12s %14s %12s\n", $1, $2, $3, $4, $5, $6 }' "$OUT/perf.txt"
    echo "(one sample = 1/4999 s of slurmctld CPU = $(printf %.2f "$(echo "200 / $JOBS" | bc -l)") us per submit at $JOBS submits; no sample at all: below ~3 samples, i.e. < $(printf %.2f "$(echo "600 / $JOBS" | bc -l)") us per submit, at 95 % confidence)"
    echo "(top of each configuration's slurmctld profile by DSO: $OUT/perf-dso-<config>.txt)"
fi
echo
echo "what each configuration answers to an over-ceiling request (sbatch -A agents --gpus=6):"
sed 's/^/  /' "$OUT/refusals.txt"
echo "load at the end: $(bench_load)"
