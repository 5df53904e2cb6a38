#!/usr/bin/env bash
# Scale against native Slurm (issue 26): the same queue and churn governed by teamshare and on
# native Slurm doing the reclaim itself (scale.sh MODE=native), one after the other in one run,
# and every figure both share as a ratio teamshare / native.
#
#   contrib/bench/scale-vs-native.sh [DIR]     DIR default /tmp/teamshare-bench-native
#   SIZES="1000 10000" WINDOW=30 TRIALS=20 contrib/bench/scale-vs-native.sh
#
# Environment: as scale.sh (SIZES, WINDOW, TRIALS, CHURN, NODES, GPUS_PER_NODE, ...). Writes
# DIR-teamshare.results, DIR-native.results and DIR.ratios. Run as root, nothing else running.
set -euo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
DIR=${1:-/tmp/teamshare-bench-native}
rm -f "$DIR-teamshare.results" "$DIR-native.results"
MODE=teamshare "$here/scale.sh" "$DIR-teamshare"
MODE=native "$here/scale.sh" "$DIR-native"
python3 - "$DIR-teamshare.results" "$DIR-native.results" <<'PY' | tee "$DIR.ratios"
import sys

def rows(path):
    out = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 10 or not cells[0].isdigit():
            continue
        out[int(cells[0])] = cells
    return out

def nums(cell):
    vals = []
    for part in cell.replace(",", " ").split():
        try:
            vals.append(float(part.rstrip("%")))
        except ValueError:
            pass
    return vals

def ratio(a, b):
    return f"{a / b:.2f}x" if b > 0 else "-"

ts, nat = rows(sys.argv[1]), rows(sys.argv[2])
print("| waiting | reclaim p50 ts / native s | reclaim p95 ts / native s | p95 ratio "
      "| slurmctld CPU ts / native | squeue ts / native s | sbatch ts / native s |")
print("|---|---|---|---|---|---|---|")
for n in sorted(set(ts) & set(nat)):
    t, v = ts[n], nat[n]
    tr, vr = nums(t[9]), nums(v[9])
    tc, vc = nums(t[5])[0], nums(v[5])[0]
    tq, vq = nums(t[7])[0], nums(v[7])[0]
    tb, vb = nums(t[8])[0], nums(v[8])[0]
    print(f"| {n} | {tr[0]:.3f} / {vr[0]:.3f} | {tr[1]:.3f} / {vr[1]:.3f} | {ratio(tr[1], vr[1])} "
          f"| {tc:.1f} / {vc:.1f} % ({ratio(tc, vc)}) | {tq:.3f} / {vq:.3f} ({ratio(tq, vq)}) "
          f"| {tb:.3f} / {vb:.3f} ({ratio(tb, vb)}) |")
PY
