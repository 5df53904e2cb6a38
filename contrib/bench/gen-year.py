#!/usr/bin/env python3
"""A synthetic year of a 1,000-GPU site (125 nodes x 8 GPUs) as a Standard Workload Format
file, for `accountd replay` benchmarks (contrib/bench/replay.sh).

Writes into DIR:
  year.swf      the jobs, SWF 2.2 (header with UnixStartTime and MaxProcs=1000; a processor
                is a GPU; wait time -1: a model, not a log, so there is no "as today")
  team-map.txt  the team map of `accountd replay --team-map` (groups -> teams, queues ->
                priority classes); the teams are those of contrib/bench/replay-1000.toml
and prints what it generated (jobs, mean GPUs, offered load per team and overall, the share
of hours whose offered load exceeds the cluster) on stderr.

The five teams (group id, quota in replay-1000.toml):
  training  (1, 400)  few large jobs (8-32 GPUs, multi-node above 8), long runs, mild daily
                      and weekly cycles, two month-long pushes before deadlines
  research  (2, 220)  mixed 1-16 GPUs, strong daily and weekly cycles (office hours)
  agents    (3, 180)  bursty: week-long campaigns every few weeks at 5x its usual rate
  inference (4, 120)  steady small jobs (1-4 GPUs) in the non-preemptible class "inference"
  vision    (5,  80)  the smallest, office hours
Arrivals are Poisson per hour with rate base x daily x weekly x campaign; run times are
log-normal per team (at most 4 days); time limits are 1.5-5x the run time rounded up to
15 minutes (at most 7 days); 1 % of jobs are cancelled while they wait (status 5), 4 % fail.
Queues: 1 standard, 2 inference, 3 experiment (short research and vision jobs).

--whole-node (issue 24): the preemptible teams' jobs mostly take whole 8-GPU nodes (half of
them 8 GPUs, 3 in 10 of 16 or 32), fewer of them so that each team offers the same GPU-hours.

Deterministic for a given --seed; stdlib only.

usage: gen-year.py DIR [--seed S] [--jobs N] [--start UNIX] [--days D] [--whole-node]
"""
import argparse
import math
import os
import random
import sys
import time

CAPACITY = 1000
GPUS_PER_NODE = 8
HOUR = 3600
DAY = 86400
MAX_RUN = 4 * DAY
MAX_LIMIT = 7 * DAY
GPU_SIZES = (1, 2, 4, 8, 16, 32)

# name, group, share of the jobs, GPU-count weights over GPU_SIZES, mean run (h), sigma of
# log(run), daily amplitude, weekend factor, users, experiment share (queue 3)
TEAMS = [
    ("training", 1, 0.075, (0.05, 0.05, 0.10, 0.35, 0.30, 0.15), 7.6, 1.3, 0.20, 0.80, 24, 0.0),
    ("research", 2, 0.300, (0.35, 0.25, 0.20, 0.15, 0.05, 0.00), 3.45, 1.2, 0.60, 0.35, 60, 0.30),
    ("agents", 3, 0.150, (0.20, 0.20, 0.30, 0.25, 0.05, 0.00), 4.3, 1.1, 0.30, 0.70, 30, 0.0),
    ("inference", 4, 0.375, (0.70, 0.25, 0.05, 0.00, 0.00, 0.00), 3.2, 0.9, 0.15, 0.90, 12, 0.0),
    ("vision", 5, 0.100, (0.30, 0.30, 0.25, 0.15, 0.00, 0.00), 3.9, 1.2, 0.50, 0.40, 16, 0.30),
]
QUEUES = {1: "standard", 2: "inference", 3: "experiment"}
# --whole-node: the GPU-count weights of every team but inference.
WHOLE_NODE = (0.10, 0.05, 0.05, 0.50, 0.20, 0.10)


def poisson(rng, lam):
    """A Poisson draw (Knuth's method below 30, a rounded normal above)."""
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, int(round(rng.gauss(lam, math.sqrt(lam)))))
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def campaigns(rng, hours):
    """Agents' week-long campaigns: starts every 3-7 weeks."""
    out = []
    t = rng.randint(7, 28) * 24
    while t < hours:
        out.append((t, t + 7 * 24))
        t += rng.randint(21, 49) * 24
    return out


def deadline_pushes(rng, hours):
    """Training's two month-long pushes (1.6x) before deadlines (one, starting after the
    period, in a trace of under 62 days: too short for two)."""
    days = range(30 * 24, max(31 * 24, hours - 30 * 24), 24)
    starts = sorted(rng.sample(days, min(2, len(days))))
    return [(s, s + 30 * 24) for s in starts]


def rate_shape(team, start, hours, bursts):
    """The relative arrival rate of each hour of the year."""
    _, _, _, _, _, _, daily, weekend, _, _ = team
    shape = []
    for h in range(hours):
        tm = time.gmtime(start + h * HOUR)
        hod = tm.tm_hour + 0.5
        f = 1.0 + daily * math.cos(2 * math.pi * (hod - 14) / 24)  # peak at 14:00 UTC
        if tm.tm_wday >= 5:
            f *= weekend
        shape.append(f)
    name = team[0]
    if name in bursts:
        windows, inside, outside = bursts[name]
        mult = [outside] * hours
        for a, b in windows:
            for h in range(a, min(b, hours)):
                mult[h] = inside
        shape = [s * m for s, m in zip(shape, mult)]
    return shape


def ceil_to(x, step):
    return int(-(-x // step) * step)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--jobs", type=int, default=400_000, help="expected jobs in the year")
    ap.add_argument("--start", type=int, default=1735689600, help="UnixStartTime (2025-01-01)")
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--whole-node", action="store_true",
                    help="preemptible teams' jobs mostly whole 8-GPU nodes (same GPU-hours)")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    hours = args.days * 24
    span = hours * HOUR
    bursts = {
        "agents": (campaigns(rng, hours), 5.0, 0.6),
        "training": (deadline_pushes(rng, hours), 1.6, 0.85),
    }

    jobs = []  # (submit, team index, gpus, run, limit, status, wait, user, queue)
    for ti, team in enumerate(TEAMS):
        name, group, share, weights, mean_h, sigma, _, _, users, exp_share = team
        shape = rate_shape(team, args.start, hours, bursts)
        scale = args.jobs * share / sum(shape)
        if args.whole_node and name != "inference":
            # The same GPU-hours in fewer, wider jobs.
            mean = lambda w: sum(g * x for g, x in zip(GPU_SIZES, w)) / sum(w)
            scale *= mean(weights) / mean(WHOLE_NODE)
            weights = WHOLE_NODE
        mu = math.log(mean_h * HOUR) - sigma * sigma / 2
        trng = random.Random(f"{args.seed}-{name}")
        for h, s in enumerate(shape):
            for _ in range(poisson(trng, s * scale)):
                submit = h * HOUR + trng.randrange(HOUR)
                gpus = trng.choices(GPU_SIZES, weights)[0]
                run = int(min(MAX_RUN, max(60, trng.lognormvariate(mu, sigma))))
                limit = min(MAX_LIMIT, ceil_to(run * trng.uniform(1.5, 5.0), 900))
                queue = 2 if name == "inference" else 1
                if exp_share and run < 2 * HOUR and trng.random() < exp_share * 2:
                    queue = 3
                u = trng.random()
                status, wait = 1, -1
                if u < 0.01:
                    # Cancelled while it waited: its owner gave up after a log-normal patience.
                    status, wait = 5, int(trng.lognormvariate(math.log(2 * HOUR), 1.0))
                    run = 0
                elif u < 0.05:
                    status = 0
                user = group * 1000 + trng.randrange(users)
                jobs.append((submit, ti, gpus, run, limit, status, wait, user, queue))
    jobs.sort(key=lambda j: (j[0], j[1], j[7]))

    os.makedirs(args.dir, exist_ok=True)
    swf = os.path.join(args.dir, "year.swf")
    fmt_date = lambda t: time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(t))
    with open(swf + ".tmp", "w") as f:
        w = f.write
        w("; Version: 2.2\n")
        w(f"; Computer: synthetic site, {CAPACITY // GPUS_PER_NODE} nodes x {GPUS_PER_NODE} GPUs\n")
        w(f"; Installation: teamshare contrib/bench/gen-year.py --seed {args.seed} --jobs {args.jobs}"
          f"{' --whole-node' if args.whole_node else ''}\n")
        w("; Conversion: generated (a model): wait times are unknown (-1) except for cancelled jobs\n")
        w(f"; MaxJobs: {len(jobs)}\n")
        w(f"; MaxRecords: {len(jobs)}\n")
        w("; Preemption: No\n")
        w(f"; UnixStartTime: {args.start}\n")
        w("; TimeZoneString: UTC\n")
        w(f"; StartTime: {fmt_date(args.start)}\n")
        w(f"; EndTime: {fmt_date(args.start + span)}\n")
        w(f"; MaxNodes: {CAPACITY // GPUS_PER_NODE}\n")
        w(f"; MaxProcs: {CAPACITY}\n")
        w(f"; MaxRuntime: {MAX_LIMIT}\n")
        w(f"; MaxQueues: {len(QUEUES)}\n")
        w("; Queues: " + ", ".join(f"{q} {n}" for q, n in QUEUES.items()) + "\n")
        w("; MaxPartitions: 1\n")
        w("; Partitions: 1 gpu\n")
        w("; Note: a processor is a GPU; groups are teams: "
          + ", ".join(f"{t[1]} {t[0]}" for t in TEAMS) + "\n")
        w(";\n")
        for n, (submit, ti, gpus, run, limit, status, wait, user, queue) in enumerate(jobs, 1):
            group = TEAMS[ti][1]
            w(f"{n} {submit} {wait} {run} {gpus} -1 -1 {gpus} {limit} -1 {status} "
              f"{user} {group} -1 {queue} 1 -1 -1\n")
    os.replace(swf + ".tmp", swf)

    with open(os.path.join(args.dir, "team-map.txt"), "w") as f:
        f.write("# contrib/bench/gen-year.py: the SWF groups are the teams of replay-1000.toml\n")
        for t in TEAMS:
            f.write(f"group {t[1]} = {t[0]}\n")
        for q, n in QUEUES.items():
            f.write(f"queue {q} = class:{n}\n")
        f.write("gpus_per_proc = 1\ngpus_per_node = 8\n")

    # What was generated: offered load = GPU-seconds of the jobs that run / (capacity x span).
    ran = [j for j in jobs if j[5] != 5]
    total = sum(j[2] * j[3] for j in ran)
    hourly = [0.0] * (hours + MAX_RUN // HOUR + 1)
    for j in ran:
        t, end, g = j[0], j[0] + j[3], j[2]
        while t < end:
            h = t // HOUR
            nxt = min(end, (h + 1) * HOUR)
            hourly[h] += g * (nxt - t)
            t = nxt
    over = sum(1 for x in hourly[:hours] if x > CAPACITY * HOUR)
    peak_week = max(sum(hourly[h:h + 168]) for h in range(0, hours - 168, 24)) / (CAPACITY * 168 * HOUR)
    out = sys.stderr.write
    out(f"{swf}: {len(jobs)} jobs ({len(jobs) - len(ran)} cancelled while waiting), "
        f"mean {sum(j[2] for j in jobs) / len(jobs):.2f} GPUs, "
        f"mean run {sum(j[3] for j in ran) / len(ran) / HOUR:.2f} h, "
        f"{sum(1 for j in jobs if j[2] > GPUS_PER_NODE)} multi-node\n")
    out(f"offered load {total / (CAPACITY * span):.1%} of {CAPACITY} GPUs; "
        f"{over} of {hours} hours ({over / hours:.1%}) above capacity; "
        f"busiest week {peak_week:.0%}\n")
    for ti, t in enumerate(TEAMS):
        tj = [j for j in ran if j[1] == ti]
        gs = sum(j[2] * j[3] for j in tj)
        out(f"  {t[0]:<10} {len(tj):>7} jobs  mean {sum(j[2] for j in tj) / len(tj):5.2f} GPUs  "
            f"offered {gs / span:6.1f} GPUs on average\n")


if __name__ == "__main__":
    main()
