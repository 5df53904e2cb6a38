#!/usr/bin/env bash
# What Slurm does with MIG-like slices (typed gres/gpu) and gres/shard, on a throwaway cluster of
# contrib/cluster/start.sh without teamshare: node gres, squeue's and sacct's TRES of slice and
# shard jobs, which GPUs shards land on, and whether GrpTRES on gres/shard and on a slice type
# holds a job back. The facts of docs/design/fractional-gpus.md; run it as root from the
# repository root, on the host (22.05) or in a release root:
#   contrib/slurm/fractional-facts.sh
#   contrib/slurm-release.sh exec 24.11 env SLURMCTLD_PORT=36817 SLURMDBD_PORT=36819 \
#     MARIADB_PORT=33306 SLURMD_PORT_BASE=37001 contrib/slurm/fractional-facts.sh
set -u
D=/tmp/teamshare-frac-$$
trap 'contrib/cluster/stop.sh "$D" --purge >/dev/null 2>&1; rm -f "$D.log"' EXIT
NODES=3 GPU_TYPES="a100 a100:1+1g.10gb:7 a100" SHARDS="0 0 4" contrib/cluster/start.sh "$D" >"$D.log" 2>&1 ||
    { tail -20 "$D.log"; exit 1; }
. "$D/env"
sinfo --version
sinfo -N -o "%N %G"
scontrol show node n3 | grep -E "Gres=|CfgTRES"
sacctmgr -i add account ta,tb >/dev/null
sacctmgr -i add user root account=ta,tb >/dev/null
sbatch -Q -A ta -p gpu --gres=gpu:1g.10gb:1 --wrap 'sleep 300'
sbatch -Q -A ta -p gpu --gres=shard:3 --wrap 'sleep 300'
sbatch -Q -A ta -p gpu --gres=shard:2 --wrap 'sleep 300'
sbatch -Q -A tb -p gpu --gpus=1g.10gb:2 --wrap 'sleep 300'
sbatch -Q -A tb -p gpu --gres=shard:a100:1 --wrap 'sleep 300'
sbatch -Q -A tb -p gpu --gpus-per-node=1g.10gb:1 --wrap 'sleep 300'
for _ in $(seq 30); do [[ -z $(squeue -h -t PD) ]] && break; sleep 1; done
squeue -O "JobID:6,State:9,tres-alloc:64,tres-per-job:20,tres-per-node:24,NodeList:5"
for j in 2 3 4 6; do scontrol show job -d "$j" | grep -E "GRES=|TresPer"; done
scontrol show node n3 | grep AllocTRES
# Two shard jobs hold shards of two GPUs: a job asking for all 4 whole GPUs of n3 waits.
sbatch -Q -A tb -p gpu -w n3 --gres=gpu:a100:4 --wrap 'sleep 300'
sacctmgr -i modify account ta set GrpTRES=gres/shard=6 >/dev/null
sbatch -Q -A ta -p gpu --gres=shard:2 --wrap 'sleep 300'
sacctmgr -i modify account tb set GrpTRES=gres/gpu:1g.10gb=3 >/dev/null
sbatch -Q -A tb -p gpu --gres=gpu:1g.10gb:1 --wrap 'sleep 300'
sleep 5
squeue -t PD -o "%i %a %T %r %b"
# sbatch itself refuses a GPU and a shard in one job.
sbatch -Q -A ta -p gpu --gres=gpu:1,shard:1 --wrap 'sleep 1' || true
scancel -u root
sleep 3
sacct -X -n -o JobID,Account,State,AllocTRES%64
