#!/usr/bin/env bash
# The demo: build, start a throwaway cluster with the plugin registered, run jobs for three
# teams (one refused by the plugin), ingest accounting with accountd and print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

contrib/install-deps.sh
cargo build --release --locked --workspace

dir="${DEMO_DIR:-/tmp/teamshare-demo}"
contrib/cluster/stop.sh "$dir" >/dev/null 2>&1 || true
rm -rf "$dir"
trap 'contrib/cluster/stop.sh "$dir" >/dev/null 2>&1 || true' EXIT

export TEAMSHARE_PLUGIN="$PWD/target/release/libjob_submit_teamshare.so"
export TEAMSHARE_CONFIG="$PWD/config/examples/teamshare.toml"
export ACCOUNTD="$PWD/target/release/accountd"
contrib/cluster/start.sh "$dir"
export SLURM_CONF="$dir/etc/slurm.conf"
accountd() { "$ACCOUNTD" --config "$dir/etc/teamshare.toml" --database "$dir/accountd.db" "$@"; }

step() { printf '\n== %s\n' "$*"; }

step "teams, as accountd reads teamshare.toml"
accountd check-config

step "a job for an account that is not a team is refused by the plugin"
if sbatch -A marketing -p gpu --gres=gpu:1 --wrap 'sleep 1'; then
    echo "demo: the plugin accepted a job it must refuse" >&2
    exit 1
fi
step "a job larger than its team's quota plus borrow limit is refused too"
if sbatch -A agents -p gpu --gpus=6 --wrap 'sleep 1'; then
    echo "demo: the plugin accepted a job it must refuse" >&2
    exit 1
fi

step "submitting jobs for agents, training and research"
ids=()
submit() { ids+=("$(sbatch --parsable -o /dev/null -A "$1" -p gpu --gres="gpu:$2" --wrap "sleep $3")"); }
submit agents 1 4
submit agents 1 3
submit training 2 5
submit training 2 4
submit research 1 6
squeue -o '%.6i %.9a %.10T %.12b %.8M'

step "waiting for the jobs to finish and reach the accounting database"
list=$(IFS=,; echo "${ids[*]}")
deadline=$((SECONDS + 180))
until [ "$(sacct -n -X -P -j "$list" -o State,End | grep -c '^COMPLETED|[0-9]')" -eq "${#ids[@]}" ]; do
    if ((SECONDS > deadline)); then echo "demo: jobs did not complete in time" >&2; exit 1; fi
    sleep 1
done
sacct -X -j "$list" -o JobID,Account,State,Start,End,AllocTRES%40

step "accountd ingest (twice: the second changes nothing) and the per-team report"
accountd ingest --since now-1h --until now+1h
accountd ingest --since now-1h --until now+1h
accountd report teams --since now-1h --until now+1h
