#!/bin/bash
# Run a live-cluster benchmark once per supported Slurm release: natively on the host's release,
# in its Debian root (contrib/slurm-release.sh) on the others, each against the plugin and
# accountd built for that release.
#
#   contrib/bench/per-release.sh SCRIPT [ARGS...]     e.g. reclaim-latency.sh, submit-overhead.sh
#
# Environment: RELEASES (default: every supported release), and whatever SCRIPT reads (TRIALS,
# JOBS, MODE, ...), passed through. Each run's output goes to target/bench/<release>-<script>.log
# and to this script's output. The releases run one after the other, never side by side.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 1 ]] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
script=$1
shift
[[ -x contrib/bench/$script ]] || { echo "per-release: no contrib/bench/$script" >&2; exit 2; }
read -r -a releases <<<"${RELEASES:-$(contrib/slurm-release.sh list | tr '\n' ' ')}"
native=$(contrib/slurm-release.sh native)
mkdir -p target/bench
# Everything the benchmark scripts read, passed into the roots (slurm-release.sh passes only
# TEAMSHARE_* and LIVE_*).
pass=()
for v in TRIALS JOBS BLOCK PAR PERF CONFIGS TYPED MODE POLL; do
    [[ -n ${!v:-} ]] && pass+=("$v=${!v}")
done
for r in "${releases[@]}"; do
    bin=$(contrib/slurm-release.sh build "$r")
    log=target/bench/$r-${script%.sh}.log
    echo "==== $script on Slurm $r ($(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg))" | tee "$log"
    if [[ $r == "$native" ]]; then
        env "${pass[@]}" ACCOUNTD="$bin/accountd" TEAMSHARE_PLUGIN="$bin/libjob_submit_teamshare.so" \
            "contrib/bench/$script" "$@" 2>&1 | tee -a "$log"
    else
        contrib/slurm-release.sh exec "$r" env "${pass[@]}" ACCOUNTD="$bin/accountd" \
            TEAMSHARE_PLUGIN="$bin/libjob_submit_teamshare.so" "contrib/bench/$script" "$@" 2>&1 | tee -a "$log"
    fi
done
