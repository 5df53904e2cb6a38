#!/usr/bin/env bash
# The demo: build, start a throwaway Slurm cluster (n1: 4 H100, n2: 4 A100, n3: a whole A30
# and two A30s cut into 8 MIG-like slices) with the plugin registered and the governor running,
# show the plugin's refusals, a team borrowing idle H100 beside its own A100 and two teams
# reclaiming their H100 quota by preemption, a serving team on slices borrowing another team's
# idle slices and giving one back (with the timeline), then accountd's reports.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

contrib/install-deps.sh
cargo build --release --locked --workspace

dir="${DEMO_DIR:-/tmp/teamshare-demo}"
contrib/cluster/stop.sh "$dir" >/dev/null 2>&1 || true
rm -rf "$dir"
gov_pid=""
cleanup() {
    if [ -n "$gov_pid" ]; then
        kill "$gov_pid" 2>/dev/null || true
        wait "$gov_pid" 2>/dev/null || true
    fi
    contrib/cluster/stop.sh "$dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT

export TEAMSHARE_PLUGIN="$PWD/target/release/libjob_submit_teamshare.so"
export TEAMSHARE_CONFIG="$PWD/contrib/demo/teamshare.toml"
export ACCOUNTD="$PWD/target/release/accountd"
export NODES=3 GPU_TYPES="h100 a100 a30:1+1g.6gb:8"
contrib/cluster/start.sh "$dir"
export SLURM_CONF="$dir/etc/slurm.conf"
accountd() { "$ACCOUNTD" --config "$dir/etc/teamshare.toml" "$@"; }

t0=$(date +%s.%N)
now() { printf '%6.1fs' "$(echo "$(date +%s.%N) - $t0" | bc)"; }
step() { printf '\n== [%s] %s\n' "$(now)" "$*"; }
teams() {
    # What each team holds of each type, from the governor's published state.
    python3 - "$dir/etc/state.json" "$dir/etc/teamshare.toml" <<'PY'
import json, sys, tomllib
s = json.load(open(sys.argv[1]))
conf = tomllib.load(open(sys.argv[2], "rb"))
teams = conf["team"]
# A family's quota is in GPU-equivalents: `accountd status` shows those pools as split.
family = {k for k, t in conf["gpu_types"].items() if "slices_of" in t}
family |= {t["slices_of"] for t in conf["gpu_types"].values() if "slices_of" in t}
for k, pool in sorted(s["pools"].items()):
    if k in family:
        continue
    for t in teams:
        v = pool["teams"][t["name"]]
        q = t["quota"].get(k, 0) if isinstance(t["quota"], dict) else 0
        held = v["running_gpus"]
        if held or q:
            print(f"   {t['name']:9} holds {held} {k}: {min(held, q)} in quota, {max(0, held - q)} borrowed; may hold {v['gpu_limit']} {k} now")
PY
}
wait_running() { # team type count
    local deadline=$((SECONDS + 120))
    until [ "$(squeue -h -A "$1" -t R -o %b | grep -c ":$2:")" -ge "$3" ]; do
        ((SECONDS < deadline)) || { echo "demo: $1 did not reach $3 running $2 jobs" >&2; exit 1; }
        sleep 0.1
    done
}

step "teams, as accountd reads teamshare.toml"
accountd check-config

step "accountd run: the governor keeps Slurm's priorities and team limits current; ingest; /metrics"
# The binary itself, not the shell function, so that $! is the daemon's pid.
"$ACCOUNTD" --config "$dir/etc/teamshare.toml" run --govern-interval 500ms >"$dir/log/accountd.log" 2>&1 &
gov_pid=$!
until [ -s "$dir/etc/state.json" ]; do sleep 0.2; done
sleep 1

step "refusals, at submit time, with the plugin's reason"
for args in "-A marketing --gres=gpu:h100:1" "-A agents --gres=gpu:1" "-A agents --gpus=h100:6" "-A agents --gres=gpu:h100:1 --qos=gold"; do
    # shellcheck disable=SC2086
    if sbatch -p gpu $args --wrap 'sleep 1' 2>&1; then echo "demo: accepted a job it must refuse" >&2; exit 1; fi
done

step "training submits 4 A100 jobs (its quota) and 4 H100 jobs, borrowed from idle agents and research H100 quota"
ids=()
submit() { ids+=("$(sbatch --parsable -o /dev/null -A "$1" -p gpu --gres="gpu:$2:1" --wrap "sleep $3")"); }
for _ in 1 2 3 4; do submit training a100 300; done
for _ in 1 2 3 4; do submit training h100 300; done
wait_running training a100 4
wait_running training h100 4
sleep 1.5
squeue -o '%.5i %.9a %.8T %.12Q %.20S %b' --sort=S
teams

step "agents needs its H100 back: 2 jobs; Slurm preempts exactly 2 borrowed training H100 jobs, none of its A100"
t_submit=$(date +%s.%N)
submit agents h100 300
submit agents h100 300
wait_running agents h100 2
printf '   agents running %.2f s after sbatch\n' "$(echo "$(date +%s.%N) - $t_submit" | bc)"
sleep 1.5
teams

step "research reclaims its H100 quota too: 2 jobs"
t_submit=$(date +%s.%N)
submit research h100 300
submit research h100 300
wait_running research h100 2
printf '   research running %.2f s after sbatch\n' "$(echo "$(date +%s.%N) - $t_submit" | bc)"
sleep 1.5
squeue -o '%.5i %.9a %.8T %.12Q %.20S %b %r' --sort=-T
teams
if [ "$(squeue -h -A training -t R -o %b | grep -c ':a100:')" -ne 4 ]; then
    echo "demo: an H100 reclaim touched training's A100 jobs" >&2; exit 1
fi

step "MIG slices: serving (1 A30's worth = 4 slices of 1/4) fills n3's 8 slices: 4 in quota, 4 borrowed on training's idle A30 quota"
for _ in 1 2 3 4 5 6 7 8; do submit serving 1g.6gb 300; done
wait_running serving 1g.6gb 8
sleep 1.5
accountd status --team serving

step "training takes one slice of its A30 quota back: Slurm preempts exactly one of serving's borrowed slices"
t_submit=$(date +%s.%N)
submit training 1g.6gb 300
wait_running training 1g.6gb 1
printf '   training running %.2f s after sbatch\n' "$(echo "$(date +%s.%N) - $t_submit" | bc)"
sleep 1.5
if [ "$(squeue -h -A serving -t R -o %b | grep -c ':1g.6gb:')" -ne 7 ]; then
    echo "demo: a slice reclaim took more or less than one of serving's slices" >&2; exit 1
fi
accountd status --team serving
accountd status --team training

step "timeline (sacct, every run of every job; requeued jobs went back to the queue)"
scancel "${ids[@]}"
list=$(IFS=,; echo "${ids[*]}")
deadline=$((SECONDS + 120))
until [ "$(sacct -n -X -D -P -j "$list" -o State | grep -c -E 'RUNNING|PENDING' || true)" -eq 0 ]; do
    ((SECONDS < deadline)) || break
    sleep 0.5
done
TZ=UTC sacct -X -D -j "$list" -o JobID,Account,State,Start,End --noconvert | sed -n '1,2p'
TZ=UTC sacct -n -X -D -P -j "$list" -o JobID,Account,State,Start,End | sort -t'|' -k4,4 -k1,1n |
    awk -F'|' '{ printf "   %-6s %-9s %-10s %s .. %s\n", $1, $2, $3, $4, $5 }'

step "accounting: accountd ingest (twice: the second changes nothing) and the reports"
accountd ingest --since now-1h --until now+1h
accountd ingest --since now-1h --until now+1h
accountd report teams --since now-1h --until now+1h --by-type
accountd report fairshare

step "accountd replay of this hour: the demo's teams siloed, then as configured (GPU-hours in GPU-equivalents)"
accountd replay --since now-1h --until now+1h --skip-calibration --candidate siloed \
    --candidate "$dir/etc/teamshare.toml" --format json >"$dir/replay.json"
python3 - "$dir/replay.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["columns"]:
    for row in c["figures"]["rows"]:
        if row["team"] in ("serving", "training"):
            print(f'   {c["candidate"]:15} {row["team"]:9} p95 wait {row["wait"]["p95_secs"]}s, '
                  f'in quota {row["in_quota_gpu_hours"]:.3f}, borrowed {row["borrowed_gpu_hours"]:.3f} '
                  f'GPU-equivalent hours, {row["preemptions"]} preempted')
for n in r["notes"]:
    if "GPU-equivalents" in n:
        print("   note:", n)
PY

step "Prometheus metrics served by accountd run (a few of them)"
python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:19477/metrics").read().decode())' |
    grep -E '^teamshare_(quota_gpus|gpus_in_use|gpu_equivalents_in_use|governor_requeues_total|month_preempted_runs|capacity_gpus)' | head -30
