#!/usr/bin/env python3
"""The utilisation harness's workload, player and analysis (contrib/bench/utilisation.sh).

    utilisation.py gen --variant default|wholenode|scale --seed N OUT.json
    utilisation.py play WORKLOAD.json MODE OUT.json        (SLURM_CONF names the cluster)
    utilisation.py summary RESULT.json...

gen: a seeded, bursty multi-team workload (each team's jobs arrive in bursts; sizes and
durations drawn per variant), offered at about 120 % of the cluster's GPU-seconds over the
window. play: submits it on time to the cluster SLURM_CONF names (sbatch -A team
--gres=gpu:N, a sleep), samples squeue every 0.25 s until every job ended, then reads sacct.
summary: the figures of each result, the three modes side by side, each figure's median over
the runs and its spread (min-max), and teamshare's ratios to the plain pool.

Definitions (from the samples, between each sample and the next):
- IWW, GPU-seconds idle while an eligible job waited: GPUs no job holds (running or ending),
  counted while any job waits that is not held back by a begin time, a dependency or a hold.
- IWW-fit: only the idle GPUs a waiting job would fit into (the waiting jobs, in priority
  order, packed onto the nodes' idle GPUs, best fit; a job of several nodes needs that many
  nodes each with its share); the longest stretch with such a GPU is "longest idle-fit".
- utilisation: GPU-seconds held by running jobs over the capacity's, from the first submission
  to the last end (the makespan); useful utilisation leaves out the GPU-seconds of runs a
  preemption or requeue threw away (their work is done again).
- in-quota start: the wait of the jobs whose team, at their submission, ran and waited for
  no more than its quota with them (judged from the sample before); and, for teamshare, from
  the first sample where the governor ranked a job in its team's quota (priority at the
  no-preempt level or above, below the protected band) to its start.
- preemptions and lost GPU-seconds: runs that ended PREEMPTED or REQUEUED (sacct -D), and the
  GPU-seconds they had run.
"""

import json
import random
import statistics
import subprocess
import sys
import threading
import time

VARIANTS = {
    # 3 nodes x 4 GPUs, quotas 4/4/4, borrow limit 8 (issue 24's workload): 2/3 of the jobs
    # take 1 GPU, about 30 % take 2 and a few a whole node.
    "default": {
        "nodes": 3, "gpus_per_node": 4, "window": 240, "load": 1.2,
        "teams": [("heavy", 4, 8, 0.50), ("medium", 4, 8, 0.33), ("light", 4, 8, 0.17)],
        "sizes": [(1, 0.66), (2, 0.30), (4, 0.04)],
        "duration": (10, 45), "burst": (1, 6),
    },
    # Whole-node jobs: 4-GPU jobs on 4-GPU nodes with the one- and two-GPU jobs of two teams
    # over their quotas spread over every node.
    "wholenode": {
        "nodes": 3, "gpus_per_node": 4, "window": 240, "load": 1.2,
        "teams": [("heavy", 4, 8, 0.45), ("medium", 4, 8, 0.35), ("light", 4, 8, 0.20)],
        "sizes": [(1, 0.35), (2, 0.25), (4, 0.40)],
        "duration": (10, 45), "burst": (1, 4),
    },
    # 16 x 8 GPUs, four teams.
    "scale": {
        "nodes": 16, "gpus_per_node": 8, "window": 240, "load": 1.2,
        "teams": [("heavy", 32, 96, 0.40), ("medium", 32, 96, 0.30), ("light", 32, 96, 0.10),
                  ("steady", 32, 96, 0.20)],
        "sizes": [(1, 0.50), (2, 0.25), (4, 0.15), (8, 0.10)],
        "duration": (10, 45), "burst": (2, 12),
    },
}


def draw(rng, weighted):
    x = rng.random()
    for value, w in weighted:
        if x < w:
            return value
        x -= w
    return weighted[-1][0]


def gen(variant, seed):
    v = VARIANTS[variant]
    rng = random.Random(seed)
    capacity = v["nodes"] * v["gpus_per_node"]
    offered = v["load"] * capacity * v["window"]
    jobs = []
    for team, _quota, _borrow, share in v["teams"]:
        target = offered * share
        gpu_s = 0.0
        # Bursts at random instants of the window, until the team's share is offered.
        while gpu_s < target:
            t = rng.uniform(0, v["window"] - 5)
            for k in range(rng.randint(*v["burst"])):
                gpus = draw(rng, v["sizes"])
                dur = rng.randint(*v["duration"])
                jobs.append({"t": round(t + 0.2 * k, 2), "team": team, "gpus": gpus, "duration": dur})
                gpu_s += gpus * dur
                if gpu_s >= target:
                    break
    jobs.sort(key=lambda j: (j["t"], j["team"]))
    for i, j in enumerate(jobs):
        j["n"] = i
    return {
        "variant": variant, "seed": seed, "nodes": v["nodes"], "gpus_per_node": v["gpus_per_node"],
        "window": v["window"],
        "teams": [{"name": t, "quota": q, "borrow_limit": b} for t, q, b, _ in v["teams"]],
        "offered_gpu_s": sum(j["gpus"] * j["duration"] for j in jobs),
        "jobs": jobs,
    }


# ------------------------------------------------------------------------------------ play

SQUEUE = ["squeue", "-h", "-a", "-t", "PD,R,CG,CF,S", "-o", "%i|%a|%T|%r|%b|%N|%D|%Q|%V"]
NOT_WAITING = ("BeginTime", "Dependency", "JobHeld", "DependencyNeverSatisfied", "PartitionDown")


def gres_gpus(b):
    # "gres:gpu:2" (22.05), "gres/gpu:2" (24.11 on), typed "gres:gpu:h100:2"; N/A for none.
    for part in b.split(","):
        part = part.replace("gres/", "gres:")
        if part.startswith("gres:gpu"):
            try:
                return int(part.rsplit(":", 1)[1])
            except ValueError:
                return 1
    return 0


def expand(nodes):
    # n[1-3,5] -> n1 n2 n3 n5 (the cluster's names: n<i>)
    out = []
    if not nodes or nodes in ("(null)", "N/A") or nodes.startswith("("):
        return out
    i = 0
    while i < len(nodes):
        j = nodes.find("[", i)
        k = nodes.find(",", i)
        if j == -1 or (k != -1 and k < j):
            end = len(nodes) if k == -1 else k
            out.append(nodes[i:end])
            i = end + 1
            continue
        close = nodes.index("]", j)
        prefix = nodes[i:j]
        for r in nodes[j + 1:close].split(","):
            a, _, b = r.partition("-")
            for x in range(int(a), int(b or a) + 1):
                out.append(f"{prefix}{x}")
        i = close + 2
    return out


def sample(ids):
    """One squeue read: our jobs' (state, reason, gpus per node, nodes, node count, priority)."""
    out = subprocess.run(SQUEUE, capture_output=True, text=True, timeout=30).stdout
    jobs = {}
    for line in out.splitlines():
        f = line.split("|")
        if len(f) != 9 or f[0] not in ids:
            continue
        jobs[f[0]] = (f[2], f[3], gres_gpus(f[4]), expand(f[5]), int(f[6] or 1), int(f[7] or 0))
    return jobs


def play(workload, mode, out_path):
    w = json.load(open(workload))
    ids = {}          # slurm id -> workload job n
    submit_at = {}    # n -> wall time of the sbatch call
    lock = threading.Lock()
    t0 = time.time()

    def submitter():
        for j in w["jobs"]:
            delay = t0 + j["t"] - time.time()
            if delay > 0:
                time.sleep(delay)
            limit = max(2, (j["duration"] * 3 + 59) // 60 + 1)
            cmd = ["sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", "-p", "gpu",
                   "-A", j["team"], f"--gres=gpu:{j['gpus']}", f"--time={limit}",
                   f"--job-name=u{j['n']}", "--wrap", f"sleep {j['duration']}"]
            at = time.time()
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"sbatch refused job {j['n']}: {r.stderr.strip()}", file=sys.stderr)
                continue
            with lock:
                ids[r.stdout.strip().split(";")[0]] = j["n"]
                submit_at[j["n"]] = at

    th = threading.Thread(target=submitter)
    th.start()
    samples = []
    deadline = t0 + w["window"] * 6
    held_since = None
    held = []
    while True:
        with lock:
            known = set(ids)
        at = time.time()
        s = sample(known)
        samples.append((at - t0, {k: list(v) for k, v in s.items()}))
        if not th.is_alive() and not s and len(known) > 0:
            break
        # Only held jobs left (a product fault: nothing here holds a job): noted, not waited
        # for beyond a minute.
        if not th.is_alive() and s and all(v[0] == "PENDING" and v[1].startswith("JobHeld") for v in s.values()):
            held_since = held_since or at
            if at - held_since > 60:
                held = sorted(s)
                print(f"play: jobs left held: {held}", file=sys.stderr)
                break
        else:
            held_since = None
        if at > deadline:
            print("play: deadline passed with jobs left", file=sys.stderr)
            break
        time.sleep(max(0.0, 0.25 - (time.time() - at)))
    th.join()
    runs = sacct([i for i in ids if i not in held]) if held else sacct(list(ids))
    json.dump({
        "mode": mode, "workload": w, "t0": t0, "ids": ids,
        "submit_at": {str(k): v - t0 for k, v in submit_at.items()},
        "samples": samples, "runs": runs, "held": held,
    }, open(out_path, "w"))


def sacct(ids, tries=60):
    """Every run of our jobs (sacct -D), once slurmdbd has them all in a final state."""
    fields = "JobIDRaw,Account,Submit,Start,End,State,AllocTRES,NodeList"
    for _ in range(tries):
        out = subprocess.run(
            ["sacct", "-D", "-X", "-P", "-n", "-j", ",".join(ids), "-o", fields,
             "-S", "now-1days"], capture_output=True, text=True).stdout
        runs = [dict(zip(fields.split(","), l.split("|"))) for l in out.splitlines() if l]
        done = {r["JobIDRaw"] for r in runs if r["State"].startswith("COMPLETED")}
        if done >= set(ids):
            return runs
        time.sleep(2)
    print("sacct: not every job is complete in the database", file=sys.stderr)
    return runs


# ---------------------------------------------------------------------------------- analyse

def ts(s):
    return time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%S"))


def pack_fit(idle, waiting):
    """GPUs of `idle` (per node) the waiting jobs (gpus per node, nodes) would fill, in order."""
    idle = dict(idle)
    filled = 0
    for share, count in waiting:
        fits = sorted((f, n) for n, f in idle.items() if f >= share)
        if len(fits) < count:
            continue
        for f, n in fits[:count]:
            idle[n] -= share
            filled += share
    return filled


def analyse(r):
    w = r["workload"]
    per_node = w["gpus_per_node"]
    nodes = [f"n{i + 1}" for i in range(w["nodes"])]
    capacity = per_node * len(nodes)
    by_n = {j["n"]: j for j in w["jobs"]}
    slurm_to_n = r["ids"]
    team_of = {n: by_n[n]["team"] for n in by_n}
    quota = {t["name"]: t["quota"] for t in w["teams"]}
    samples = r["samples"]
    iww = iww_fit = busy = 0.0
    longest = run = 0.0
    in_quota = {}
    first_submit = min(r["submit_at"].values()) if r["submit_at"] else 0
    prev_state = {}
    # teamshare only: when each job was first seen ranked in its team's quota (a pending job at
    # or above the level that preempts nobody: reclaim_level(0) = 9,999,999, below the
    # protected band at 60,000,000).
    ranked_at = {}
    for t, jobs in samples:
        for sid, v in jobs.items():
            level = v[5] >> 6
            if v[0] == "PENDING" and 9_999_999 <= level < 60_000_000 and sid not in ranked_at:
                ranked_at[sid] = t
    for k in range(len(samples) - 1):
        t, jobs = samples[k]
        dt = samples[k + 1][0] - t
        held = {n: 0 for n in nodes}
        running = 0
        waiting = []
        team_load = {}
        for sid, (state, reason, gpus, on, count, prio) in jobs.items():
            team = team_of[slurm_to_n[sid]]
            if state in ("RUNNING", "COMPLETING"):
                for n in on:
                    held[n] = held.get(n, 0) + gpus
                if state == "RUNNING":
                    running += gpus * max(1, len(on))
                team_load[team] = team_load.get(team, 0) + gpus * max(1, len(on))
            elif state == "PENDING" and not reason.startswith(NOT_WAITING):
                waiting.append((prio, sid, gpus, count))
                team_load[team] = team_load.get(team, 0) + gpus * count
        prev_state[k] = team_load
        idle = {n: max(0, per_node - held[n]) for n in nodes}
        busy += running * dt
        if waiting:
            iww += sum(idle.values()) * dt
            waiting.sort(key=lambda x: (-x[0], int(x[1])))
            fit = pack_fit(idle, [(g, c) for _, _, g, c in waiting])
            iww_fit += fit * dt
            run = run + dt if fit > 0 else 0.0
            longest = max(longest, run)
        else:
            run = 0.0
    # Runs: waits, turnarounds, preemptions.
    runs_by = {}
    for x in r["runs"]:
        runs_by.setdefault(x["JobIDRaw"], []).append(x)
    waits, turns, preempted, lost = {}, {}, 0, 0.0
    ranked = []
    last_end = 0.0
    t0 = r["t0"]
    for sid, n in slurm_to_n.items():
        team = team_of[n]
        rs = sorted(runs_by.get(sid, []), key=lambda x: x["Start"])
        sub = r["submit_at"].get(str(n))
        started = [x for x in rs if x["Start"] not in ("Unknown", "None")]
        if sub is None or not started:
            continue
        first = ts(started[0]["Start"]) - t0
        end = max(ts(x["End"]) for x in started if x["End"] not in ("Unknown",)) - t0
        last_end = max(last_end, end)
        wait = max(0.0, first - sub)
        waits.setdefault(team, []).append(wait)
        turns.setdefault(team, []).append(end - sub)
        for x in started:
            if x["State"].startswith(("PREEMPTED", "REQUEUED")):
                preempted += 1
                gpus = 0
                for tres in x["AllocTRES"].split(","):
                    if tres.startswith("gres/gpu="):
                        gpus = int(tres.split("=")[1])
                lost += gpus * max(0.0, ts(x["End"]) - ts(x["Start"]))
        if sid in ranked_at:
            ranked.append(max(0.0, first - ranked_at[sid]))
        # In quota at submission: the team's load in the sample before, with this job, within
        # its quota.
        k = max((i for i, (st, _) in enumerate(samples) if st <= sub), default=0)
        load = prev_state.get(k, {}).get(team, 0)
        if load + by_n[n]["gpus"] <= quota[team]:
            in_quota.setdefault(team, []).append(wait)
    makespan = last_end - first_submit
    iq = sorted(v for l in in_quota.values() for v in l)
    return {
        "mode": r["mode"],
        "iww": iww, "iww_fit": iww_fit, "longest_idle_fit": longest,
        "utilisation": 100.0 * busy / (capacity * makespan) if makespan > 0 else 0.0,
        "useful": 100.0 * (busy - lost) / (capacity * makespan) if makespan > 0 else 0.0,
        "makespan": makespan,
        "turnaround": {t: statistics.mean(v) for t, v in turns.items()},
        "wait": {t: statistics.mean(v) for t, v in waits.items()},
        "in_quota_p50": pct(iq, 50), "in_quota_p95": pct(iq, 95), "in_quota_n": len(iq),
        "ranked_p95": pct(ranked, 95), "ranked_max": max(ranked) if ranked else float("nan"),
        "preemptions": preempted, "lost_gpu_s": lost,
        "jobs": len(slurm_to_n), "samples": len(samples), "held": len(r.get("held", [])),
    }


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def spread(values, fmt):
    values = [v for v in values if v == v]
    if not values:
        return "-"
    m = statistics.median(values)
    if len(values) == 1:
        return fmt.format(m)
    return f"{fmt.format(m)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def summary(paths):
    results = [json.load(open(p)) for p in paths]
    by_mode = {}
    for r in results:
        by_mode.setdefault(r["mode"], []).append(analyse(r))
    modes = [m for m in ("plain", "teamshare", "siloed") if m in by_mode]
    w = results[0]["workload"]
    teams = [t["name"] for t in w["teams"]]
    print(f"workload: {w['variant']} seed {w['seed']}: {len(w['jobs'])} jobs on "
          f"{w['nodes']} x {w['gpus_per_node']} GPUs, {w['offered_gpu_s']} GPU-s offered in "
          f"{w['window']} s ({100 * w['offered_gpu_s'] / (w['nodes'] * w['gpus_per_node'] * w['window']):.0f} % of capacity); "
          f"runs per mode: {', '.join(f'{m} {len(by_mode[m])}' for m in modes)}")
    print("each figure: median over the runs (min-max)")
    rows = [
        ("IWW GPU-s", "iww", "{:.0f}"), ("IWW-fit GPU-s", "iww_fit", "{:.0f}"),
        ("longest idle-fit s", "longest_idle_fit", "{:.1f}"),
        ("utilisation %", "utilisation", "{:.1f}"), ("useful utilisation %", "useful", "{:.1f}"),
        ("makespan s", "makespan", "{:.0f}"),
        ("in-quota start p50 s", "in_quota_p50", "{:.1f}"),
        ("in-quota start p95 s", "in_quota_p95", "{:.1f}"),
        ("ranked in quota: start p95 s", "ranked_p95", "{:.1f}"),
        ("ranked in quota: start max s", "ranked_max", "{:.1f}"),
        ("preemptions", "preemptions", "{:.0f}"), ("lost GPU-s", "lost_gpu_s", "{:.0f}"),
        ("jobs left held", "held", "{:.0f}"),
    ]
    print(f"| figure | {' | '.join(modes)} |")
    print(f"|---|{'---|' * len(modes)}")
    for label, key, fmt in rows:
        print(f"| {label} | {' | '.join(spread([a[key] for a in by_mode[m]], fmt) for m in modes)} |")
    for t in teams:
        print(f"| {t} mean turnaround s | "
              f"{' | '.join(spread([a['turnaround'].get(t, float('nan')) for a in by_mode[m]], '{:.1f}') for m in modes)} |")
    for t in teams:
        print(f"| {t} mean wait s | "
              f"{' | '.join(spread([a['wait'].get(t, float('nan')) for a in by_mode[m]], '{:.1f}') for m in modes)} |")
    if "plain" in by_mode and "teamshare" in by_mode:
        pairs = list(zip(by_mode["plain"], by_mode["teamshare"]))
        ratio = lambda k: [b[k] / a[k] if a[k] else float("nan") for a, b in pairs]
        print()
        print("teamshare against the plain pool, run by run (median, min-max):")
        print(f"- IWW ratio {spread(ratio('iww'), '{:.2f}')}; IWW-fit ratio {spread(ratio('iww_fit'), '{:.2f}')}")
        print(f"- utilisation difference {spread([b['utilisation'] - a['utilisation'] for a, b in pairs], '{:+.1f}')} points; useful {spread([b['useful'] - a['useful'] for a, b in pairs], '{:+.1f}')} points")
        for t in teams:
            print(f"- {t} turnaround ratio {spread([b['turnaround'].get(t, 0) / a['turnaround'][t] for a, b in pairs if a['turnaround'].get(t)], '{:.2f}')}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd = sys.argv[1]
    if cmd == "gen":
        args = dict(zip(sys.argv[2:-1:2], sys.argv[3:-1:2]))
        w = gen(args.get("--variant", "default"), int(args.get("--seed", "1")))
        json.dump(w, open(sys.argv[-1], "w"), indent=1)
    elif cmd == "play":
        play(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "summary":
        summary(sys.argv[2:])
    elif cmd == "analyse":
        for p in sys.argv[2:]:
            print(json.dumps(analyse(json.load(open(p))), indent=1))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
