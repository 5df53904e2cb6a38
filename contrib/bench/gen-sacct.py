#!/usr/bin/env python3
"""Synthetic `sacct -a -X -D -P -n --noconvert -o <accountd's FIELDS>` output, for benchmarks.

The fields, in accountd/crates/slurm/src/sacct.rs FIELDS order:
  JobIDRaw|JobID|Cluster|Account|User|Partition|QOS|State|Submit|Start|End|Elapsed|AllocTRES|
  Eligible|TimelimitRaw|NNodes|ReqTRES
Times are UTC (accountd runs sacct with TZ=UTC and SLURM_TIME_FORMAT=standard).

A realistic mix, deterministic for a given --seed: ~92 % finished runs (COMPLETED, FAILED,
CANCELLED by <uid>, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL), 3 % requeued jobs (a PREEMPTED run and
a later run with the same JobIDRaw), 5 % array tasks (JobID 123_4), 1 % still running (End
Unknown), 2 % never started (Start Unknown/None: stored apart, for replay), GPU counts 1/2/4/8
with half of them typed (gres/gpu:h100=N), 3 teams + 1 CPU-only account. Eligible is the submit
time (5 % a begin time up to 10 minutes later), time limits 1 h, 4 h, 1 day (minutes) or
UNLIMITED and at least the run, one node, ReqTRES the allocation's.

usage: gen-sacct.py --records N [--cluster NAME] [--end UNIX] [--days D] [--seed S] > file
"""
import argparse
import random
import sys
import time


def fmt_time(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def fmt_elapsed(s):
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{sec:02d}"
    return f"{h:02d}:{m:02d}:{sec:02d}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--cluster", default="teamshare-live")
    ap.add_argument("--end", type=int, default=None, help="latest time (UTC unix seconds)")
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    end = a.end if a.end is not None else int(time.time()) - 60
    begin = end - a.days * 86400
    teams = ["agents", "training", "research"]
    finished = ["COMPLETED"] * 80 + ["FAILED"] * 6 + ["CANCELLED by 1000"] * 6 + \
        ["TIMEOUT"] * 4 + ["OUT_OF_MEMORY"] * 2 + ["NODE_FAIL"] * 2
    out = sys.stdout
    buf = []
    written = 0
    job = 1000
    cluster = a.cluster
    while written < a.records:
        job += 1
        r = rnd.random()
        team = teams[rnd.randrange(3)] if rnd.random() > 0.03 else "cpuonly"
        user = f"user{rnd.randrange(200):03d}"
        qos = "teamshare" if team != "cpuonly" else "normal"
        submit = rnd.randrange(begin, end - 120)
        start = submit + rnd.randrange(0, 900)
        dur = int(rnd.expovariate(1 / 2400)) + 5
        if team == "cpuonly":
            tres = f"billing=4,cpu=4,mem=16G,node=1"
        else:
            g = rnd.choice([1, 1, 1, 1, 2, 2, 4, 8])
            if rnd.random() < 0.5:
                tres = f"billing={8 * g},cpu={8 * g},gres/gpu:h100={g},gres/gpu={g},mem={64 * g}G,node=1"
            else:
                tres = f"billing={8 * g},cpu={8 * g},gres/gpu={g},mem={64 * g}G,node=1"
        jobid = str(job)
        if rnd.random() < 0.05:
            jobid = f"{job - rnd.randrange(1, 50)}_{rnd.randrange(0, 100)}"
        common = f"{job}|{jobid}|{cluster}|{team}|{user}|gpu|{qos}|"
        eligible = submit + (rnd.randrange(0, 600) if rnd.random() < 0.05 else 0)
        start = max(start, eligible)
        limit = next((m for m in rnd.choice([[60, 240, 1440], [240, 1440], [1440]]) if m * 60 >= dur), None)
        limit = "UNLIMITED" if limit is None or rnd.random() < 0.05 else str(limit)
        # Eligible|TimelimitRaw|NNodes|ReqTRES, after AllocTRES
        extra = f"|{fmt_time(eligible)}|{limit}|1|{tres}"
        if r < 0.02:
            # never started: pending at the window's end, or cancelled while pending
            if rnd.random() < 0.5:
                buf.append(common + f"PENDING|{fmt_time(submit)}|Unknown|Unknown|00:00:00|{extra}\n")
            else:
                buf.append(common + f"CANCELLED by 1000|{fmt_time(submit)}|None|{fmt_time(submit + 60)}|00:00:00|{extra}\n")
            written += 1
        elif r < 0.03:
            # still running
            run = max(0, min(end, start + dur) - start)
            start = min(start, end - 1)
            buf.append(common + f"RUNNING|{fmt_time(submit)}|{fmt_time(start)}|Unknown|{fmt_elapsed(run)}|{tres}{extra}\n")
            written += 1
        elif r < 0.06 and written + 2 <= a.records:
            # requeued: preempted, then run again later (same JobIDRaw, another start)
            first_end = start + min(dur, 600)
            buf.append(common + f"PREEMPTED|{fmt_time(submit)}|{fmt_time(start)}|{fmt_time(first_end)}|{fmt_elapsed(first_end - start)}|{tres}{extra}\n")
            s2 = first_end + 121
            e2 = s2 + dur
            buf.append(common + f"COMPLETED|{fmt_time(submit)}|{fmt_time(s2)}|{fmt_time(e2)}|{fmt_elapsed(e2 - s2)}|{tres}{extra}\n")
            written += 2
        else:
            state = finished[rnd.randrange(len(finished))]
            e = start + dur
            buf.append(common + f"{state}|{fmt_time(submit)}|{fmt_time(start)}|{fmt_time(e)}|{fmt_elapsed(dur)}|{tres}{extra}\n")
            written += 1
        if len(buf) >= 10000:
            out.write("".join(buf))
            buf.clear()
    out.write("".join(buf))


if __name__ == "__main__":
    main()
