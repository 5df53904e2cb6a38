#!/usr/bin/env python3
"""The mixed fractional-GPU churn run of contrib/bench/fractional-churn.sh (issue 30).

Against a running cluster (SLURM_CONF set) governed with contrib/bench/teamshare-mixed.toml,
for DURATION seconds: three teams keep jobs waiting (serve PENDING, inference PENDING + 2,
dev PENDING every other 30 s and none between), every job a whole A100, one
1g.10gb slice or 1 to 4 shards, sleeping 4 to 20 s; every 0.5 s a sample of what runs, in
28ths of an A100 (a whole A100 is 28, a slice 4, a shard 7), checks

- each team's ceiling: quota + borrow limit (serve 1 + 0, inference 2 + 1; dev borrows
  without limit, so its ceiling is the capacity);
- lending: what the teams above their quota borrow, in all, is at most what the teams below
  theirs may lend (the idle part of each quota, at most its lend limit; dev lends 1 of 2).

Slurm enforces the ceilings before a job starts (GrpTRES per type); lending holds once a
reclaim is done, so a sample beyond it is an overshoot, and a violation once it lasts longer
than GRACE seconds (the reclaim fallback's wait, a pass, and Slurm's next schedule).

Half-way, n3 is re-partitioned as an administrator does it: drained, its running jobs left to
end (requeued after 25 s), its A100 cut in 7 slices made whole again in slurm.conf and
gres.conf, its slurmd restarted, `scontrol reconfigure`, resumed. The capacity stays five
A100s' worth (3 whole + 14 slices -> 4 whole + 7 slices); the governor must read it.

Prints the figures as key=value lines; exits 1 when a ceiling or lending violation happened.
"""

import json
import os
import random
import re
import subprocess
import sys
import time

DIR = sys.argv[1]
DURATION = float(os.environ.get("DURATION", "240"))
PENDING = int(os.environ.get("PENDING", "3"))
GRACE = float(os.environ.get("GRACE", "5"))
SEED = int(os.environ.get("SEED", str(random.randrange(1 << 30))))
UNIT = {"gres/gpu:a100": 28, "gres/gpu:1g.10gb": 4, "gres/shard": 7}
QUOTA = {"serve": 28, "inference": 56, "dev": 56}
CEILING = {"serve": 28, "inference": 84, "dev": 5 * 28}
LEND = {"serve": 28, "inference": 56, "dev": 28}
KINDS = [("whole", "gpu:a100:1"), ("slice", "gpu:1g.10gb:1")] + [
    ("shard", f"shard:{k}") for k in (1, 2, 4)
]
rng = random.Random(SEED)
T0 = time.monotonic()


def run(*args, check=False):
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=30)


def units(tres):
    """A job's GPU-equivalents in 28ths, from its tres-alloc."""
    total = 0
    for kv in tres.split(","):
        k, _, v = kv.partition("=")
        if k.strip() in UNIT and v.strip().isdigit():
            total += UNIT[k.strip()] * int(v)
    return total


def ask_units(ask):
    """What a pending job asks for (squeue's %b: `gres:shard:2`, `gres/gpu:a100:1`), in 28ths."""
    f = ask.replace("gres/", "gres:").split(":")
    if len(f) < 3 or not f[-1].isdigit():
        return 0
    n = int(f[-1])
    if f[1] == "shard":
        return 7 * n
    return {"a100": 28, "1g.10gb": 4}.get(f[2] if len(f) > 3 else "", 0) * n


def count(tres, key):
    for kv in tres.split(","):
        k, _, v = kv.partition("=")
        if k.strip() == key and v.strip().isdigit():
            return int(v)
    return 0


def room():
    """Per kind, the most any usable node has free now: whole A100s (none with shards in
    use), slices, and shards on one GPU (GPUs held whole have none)."""
    nodes = {}
    for line in run("sinfo", "-h", "-N", "-o", "%N|%G|%t").stdout.splitlines():
        name, gres, state = (line.split("|") + ["", ""])[:3]
        if state.strip().rstrip("*") in ("idle", "mix", "alloc"):
            g = dict(re.findall(r"(gpu:a100|gpu:1g\.10gb|shard:a100):(\d+)", gres))
            nodes[name] = {k: int(v) for k, v in g.items()}
    used = {n: {"whole": 0, "slice": 0, "shard": 0} for n in nodes}
    out = run("squeue", "-h", "-t", "R,CG", "-p", "gpu", "-O", "NodeList:30|,tres-alloc:200|")
    for line in out.stdout.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) >= 2 and f[0] in used:
            used[f[0]]["whole"] += count(f[1], "gres/gpu:a100")
            used[f[0]]["slice"] += count(f[1], "gres/gpu:1g.10gb")
            used[f[0]]["shard"] += count(f[1], "gres/shard")
    best = {"whole": 0, "slice": 0, "shard": 0}
    for n, g in nodes.items():
        u, a100 = used[n], g.get("gpu:a100", 0)
        per_gpu = g.get("shard:a100", 0) // max(1, a100)
        best["whole"] = max(best["whole"], a100 - u["whole"] - -(-u["shard"] // max(1, per_gpu)))
        best["slice"] = max(best["slice"], g.get("gpu:1g.10gb", 0) - u["slice"])
        if per_gpu:
            best["shard"] = max(best["shard"], min(per_gpu, per_gpu * (a100 - u["whole"]) - u["shard"]))
    return best


def kind_of(ask):
    """A pending job's kind and count from squeue's %b."""
    f = ask.replace("gres/", "gres:").split(":")
    n = int(f[-1]) if f[-1].isdigit() else 0
    return ("shard" if "shard" in f else "slice" if "1g.10gb" in f else "whole"), n


def sample():
    out = run("squeue", "-h", "-t", "R", "-p", "gpu", "-O", "JobID:30|,Account:30|,tres-alloc:200|")
    if out.returncode != 0:
        return None
    held = {t: 0 for t in QUOTA}
    for line in out.stdout.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) >= 3 and f[1] in held:
            held[f[1]] += units(f[2])
    return held


def judge(held):
    """The teams above their ceiling, and the units borrowed beyond what may be lent."""
    over = [t for t, u in held.items() if u > CEILING[t]]
    borrowed = sum(max(0, u - QUOTA[t]) for t, u in held.items())
    lendable = sum(min(max(0, QUOTA[t] - u), LEND[t]) for t, u in held.items())
    return over, max(0, borrowed - lendable)


def demand(team, t):
    """How many jobs `team` keeps waiting at `t`: dev comes and goes every 30 s (its idle
    quota is lent while it is away, and reclaimed when it comes back); inference always
    wants more than its quota; serve its quota."""
    if team == "dev":
        return PENDING if int(t // 30) % 2 == 1 else 0
    if team == "inference":
        return PENDING + 2
    return PENDING


def churn(counts, held):
    """Keep each team's jobs waiting; count the samples of a job held back by its team's
    limit (AssocGrpGRES) although it fits the team's unused quota with the team's jobs
    ranked before it (`held`: the last sample), a guarantee not kept."""
    out = run("squeue", "-h", "-t", "PD", "-p", "gpu", "-S", "-p,i", "-o", "%a|%r|%b")
    rows = [l.split("|") for l in out.stdout.splitlines()] if out.returncode == 0 else []
    waiting = [r[0] for r in rows]
    # Each team's pending jobs in priority order, counted into its quota while they fit.
    claimed = dict(held or {})
    free = None
    for r in rows:
        if len(r) == 3:
            key = f"waiting_samples {r[0]} {r[2]} on {r[1]}"
            counts[key] = counts.get(key, 0) + 1
            fits = held and claimed.get(r[0], 0) + ask_units(r[2]) <= QUOTA.get(r[0], 0)
            if fits:
                claimed[r[0]] += ask_units(r[2])
            if r[1] == "AssocGrpGRES" and fits:
                key = f"held_within_quota_samples {r[0]} {r[2]}"
                counts[key] = counts.get(key, 0) + 1
                free = free or room()
                kind, n = kind_of(r[2])
                if free[kind] >= n:
                    key = "held_within_quota_with_room_samples"
                    counts[key] = counts.get(key, 0) + 1
    for team in QUOTA:
        for _ in range(max(0, demand(team, time.monotonic() - T0) - waiting.count(team))):
            kind, gres = rng.choice(KINDS)
            secs = rng.randint(4, 20)
            r = run("sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", "-A", team,
                    "-p", "gpu", f"--gres={gres}", "--wrap", f"sleep {secs}")
            key = f"submitted_{kind}" if r.returncode == 0 else "sbatch_refused"
            counts[key] = counts.get(key, 0) + 1
            if r.returncode != 0 and counts[key] <= 3:
                print(f"refused: {team} {gres}: {r.stderr.strip()}", file=sys.stderr)


def node_gres(node):
    return run("sinfo", "-h", "-N", "-n", node, "-o", "%G").stdout.strip()


def stop(name):
    """Stop one of the cluster's daemons as systemd would (SIGTERM) and wait for it."""
    pid = int(open(f"{DIR}/pids/{name}.pid").read())
    os.kill(pid, 15)
    for _ in range(300):
        try:
            if open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z":
                break
        except OSError:
            break
        time.sleep(0.1)


def start(name, *argv):
    """Start a daemon as contrib/cluster/start.sh does (stop.sh stops what carries the marker)."""
    env = dict(os.environ, TEAMSHARE_CLUSTER_DIR=DIR, TEAMSHARE_CONFIG=f"{DIR}/etc/teamshare.toml")
    plugin = f"{DIR}/plugins/job_submit_teamshare.so"
    if os.path.exists(plugin):
        env["TEAMSHARE_PLUGIN"] = plugin
    log = open(f"{DIR}/log/{name}.out", "a")
    p = subprocess.Popen(["setsid", *argv], cwd=f"{DIR}/run", env=env,
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    open(f"{DIR}/pids/{name}.pid", "w").write(f"{p.pid}\n")


def new_partitioning(node):
    """n3's A100 cut in 7 slices made whole again, in slurm.conf and gres.conf."""
    conf = os.environ["SLURM_CONF"]
    text = open(conf).read()
    text = re.sub(rf"(NodeName={node} .*?Gres=)\S+", r"\g<1>gpu:a100:2", text)
    open(conf, "w").write(text)
    gres = os.path.join(os.path.dirname(conf), "gres.conf")
    lines = [l for l in open(gres).read().splitlines() if not l.startswith(f"NodeName={node} Name=gpu")]
    lines.append(f"NodeName={node} Name=gpu Type=a100 File={DIR}/dev/{node}/nvidia[0-1]")
    open(gres, "w").write("\n".join(lines) + "\n")


def repartition(node, phase, t, figures):
    """One step of the re-partition per call; returns the next phase."""
    if phase == "drain":
        run("scontrol", "update", f"nodename={node}", "state=drain", "reason=repartition", check=True)
        figures["repartition_drained_s"] = round(t, 1)
        return "wait"
    if phase == "wait":
        jobs = run("squeue", "-h", "-w", node, "-t", "R,CG", "-o", "%i").stdout.split()
        if jobs and t - figures["repartition_drained_s"] < 25:
            return "wait"
        for j in jobs:
            run("scontrol", "requeue", j)
        figures["repartition_requeued"] = len(jobs)
        new_partitioning(node)
        # A node's gres count changes only with a restart of slurmctld (22.05 refuses it on
        # `scontrol reconfigure`: "Attempt to change gres/gpu Count ... invalid with File
        # configuration"), and of the node's slurmd.
        stop(f"slurmd-{node}")
        stop("slurmctld")
        start("slurmctld", "slurmctld", "-D")
        for _ in range(600):
            if "is UP" in run("scontrol", "ping").stdout:
                break
            time.sleep(0.1)
        start(f"slurmd-{node}", "slurmd", "-D", "-N", node)
        figures["repartition_restarted_s"] = round(time.monotonic() - T0, 1)
        return "resume"
    if phase == "resume":
        if node_gres(node) != "gpu:a100:2":
            return "resume"
        run("scontrol", "update", f"nodename={node}", "state=resume", check=True)
        figures["repartition_resumed_s"] = round(t, 1)
        return "state"
    if phase == "state":
        try:
            caps = json.load(open(f"{DIR}/etc/state.json")).get("capacity_by_type", {})
        except (OSError, ValueError):
            return "state"
        if caps.get("a100") == 4 and caps.get("1g.10gb") == 7:
            figures["repartition_governed_s"] = round(t, 1)
            return "done"
        return "state"
    return phase


def main():
    figures = {"seed": SEED, "duration_s": DURATION, "grace_s": GRACE}
    counts = {}
    stats = {"samples": 0, "late": 0, "squeue_failures": 0, "ceiling_overshoot_samples": 0,
             "lending_overshoot_samples": 0, "ceiling_violations": 0, "lending_violations": 0,
             "borrowing_samples": 0, "held_units": 0, "held_samples": 0}
    longest = {"ceiling": 0.0, "lending": 0.0}
    since = {"ceiling": None, "lending": None}
    examples = []
    flagged = set()
    peak = {t: 0 for t in QUOTA}
    phase = "before"
    last = None
    t0 = T0
    next_sample = t0
    while (t := time.monotonic() - t0) < DURATION or phase not in ("before", "done"):
        if t > DURATION + 120:
            figures["repartition_unfinished_phase"] = phase
            break
        if phase == "before" and t >= DURATION / 2:
            phase = "drain"
        if phase not in ("before", "done"):
            phase = repartition("n3", phase, t, figures)
        if t < DURATION:
            churn(counts, last)
        held = sample()
        last = held
        stats["samples"] += 1
        if held is None:
            stats["squeue_failures"] += 1
        else:
            for team, u in held.items():
                peak[team] = max(peak[team], u)
            stats["held_units"] += sum(held.values())
            stats["held_samples"] += 1
            over, beyond = judge(held)
            stats["borrowing_samples"] += any(u > QUOTA[x] for x, u in held.items())
            for what, bad in (("ceiling", bool(over)), ("lending", beyond > 0)):
                if not bad:
                    since[what] = None
                    continue
                stats[f"{what}_overshoot_samples"] += 1
                if since[what] is None:
                    since[what] = t
                    examples.append(f"{what} overshoot at {t:.1f} s: {held}")
                lasted = t - since[what]
                if lasted > GRACE and since[what] not in flagged:
                    flagged.add(since[what])
                    stats[f"{what}_violations"] += 1
                    examples.append(f"{what} VIOLATION since {since[what]:.1f} s: {held}")
                longest[what] = max(longest[what], lasted)
        next_sample += 0.5
        now = time.monotonic()
        if now > next_sample:
            stats["late"] += 1
            next_sample = now
        else:
            time.sleep(next_sample - now)
    for k, v in {**figures, **dict(sorted(counts.items())), **stats}.items():
        if k not in ("held_units", "held_samples"):
            print(f"{k}={v}")
    mean = stats["held_units"] / max(1, stats["held_samples"]) / 28
    print(f"mean_held_gpu_equivalents={mean:.2f} of 5")
    print(f"ceiling_overshoot_longest_s={longest['ceiling']:.1f}")
    print(f"lending_overshoot_longest_s={longest['lending']:.1f}")
    for team, u in peak.items():
        print(f"peak_{team}={u / 28:.2f} of ceiling {CEILING[team] / 28:.2f}")
    for e in examples[:20]:
        print(f"example: {e}")
    bad = stats["ceiling_violations"] + stats["lending_violations"]
    bad += "repartition_governed_s" not in figures
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
