#!/usr/bin/env bash
# Mixed fractional-GPU churn (issue 30): whole A100s, MIG-like slices and shards of one A100
# family under quotas in GPU-equivalents, with a node re-partitioned half-way. Ceilings and
# lending are sampled every 0.5 s (contrib/bench/fractional-churn.py says what is checked).
#
#   contrib/bench/fractional-churn.sh                  # 240 s of churn
#   DURATION=60 contrib/bench/fractional-churn.sh      # a short check of the script
#
# Cluster (DIR, default /tmp/teamshare-bench-churn): n1 with 2 A100 offered whole or as 4
# shards each, n2 with one A100 as 7 `1g.10gb` slices, n3 with a whole A100 and one as 7
# slices; contrib/bench/teamshare-mixed.toml; `accountd govern --interval 500ms`. Uses the
# release build of the workspace (cargo build --release). Environment: DURATION (240),
# PENDING (3 waiting jobs per team), GRACE (5 s), SEED (random; printed). Exit status:
# non-zero on a ceiling or lending violation, or when the governor did not read the new
# partitioning.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=${1:-/tmp/teamshare-bench-churn}
[[ $(id -u) == 0 ]] || bench_die "run as root (the throwaway cluster runs as root)"
bench_binaries "$DIR-bin"
bench_start "$DIR" TEAMSHARE_CONFIG="$BENCH_ROOT/contrib/bench/teamshare-mixed.toml" \
    TEAMSHARE_PLUGIN="$BIN_PLUGIN" ACCOUNTD="$BIN_ACCOUNTD" NODES=3 \
    "GPU_TYPES=a100:2 1g.10gb:7 a100:1+1g.10gb:7" "SHARDS=4 0 0" CLUSTER_NAME=teamshare-mixed
export SLURM_CONF=$DIR/etc/slurm.conf
"$BIN_ACCOUNTD" --config "$DIR/etc/teamshare.toml" govern --interval 500ms >>"$DIR/log/governor.log" 2>&1 &
bench_track $!
bench_log "$(bench_machine); load $(bench_load); commit $(git -C "$BENCH_ROOT" rev-parse --short HEAD)"
bench_log "$(sinfo -h -N -o '%N:%G' | tr '\n' ' ')"
set +e
python3 "$BENCH_ROOT/contrib/bench/fractional-churn.py" "$DIR"
RC=$?
set -e
bench_log "after: $(sinfo -h -N -o '%N:%G:%t' | tr '\n' ' '); load $(bench_load)"
exit "$RC"
