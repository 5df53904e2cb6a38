#!/usr/bin/env python3
"""A small SWF trace with wide jobs, for `accountd replay` experiments on never-started work
(issue 27, item 3; docs/design/replay.md, decision 8).

  gen-wide.py OUT.swf [--interarrival S] [--sizes 1,1,2,4,8,32] [--days 60] [--seed 7]

Jobs arrive with exponential gaps (mean --interarrival s), take a size drawn from --sizes
(repeats weigh), run log-normally around 2 h (at most 3 days), ask for twice that plus
10 minutes, and belong to groups 1-5 (weights 2, 2, 1, 1, 1). Waits are unknown (-1): a model,
not a log. The header says 100 processors; give the replay --capacity.
"""
import argparse
import math
import random

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--interarrival", type=float, default=1500)
p.add_argument("--sizes", default="1,1,1,1,2,2,4,4,8,32")
p.add_argument("--days", type=int, default=60)
p.add_argument("--seed", type=int, default=7)
a = p.parse_args()
rng = random.Random(a.seed)
sizes = [int(s) for s in a.sizes.split(",")]
lines = ["; UnixStartTime: 1700000000", "; MaxProcs: 100"]
t = n = 0
while t < a.days * 86400:
    t += int(rng.expovariate(1 / a.interarrival))
    g = rng.choice(sizes)
    run = int(min(3 * 86400, rng.lognormvariate(math.log(7200), 1.0)))
    req = min(3 * 86400, run * 2 + 600)
    grp = rng.choice([1, 1, 2, 2, 3, 4, 5])
    n += 1
    lines.append(f"{n} {t} -1 {run} {g} -1 -1 {g} {req} -1 1 {grp} {grp} -1 1 -1 -1 -1")
with open(a.out, "w") as f:
    f.write("\n".join(lines) + "\n")
