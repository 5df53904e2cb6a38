//! The end: what remains queued, the runs in sacct against what explains them, and the
//! figures that must be zero.

use super::*;

/// Jobs that completed a run (marked) and are in the queue again, with their state.
pub(super) fn queued_again_candidates(
    c: &Cluster,
    marks: &std::path::Path,
) -> Result<Vec<(u64, String)>, String> {
    let marked: BTreeSet<u64> = std::fs::read_to_string(marks)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let candidates = |c: &Cluster| -> Result<Vec<(u64, String, String)>, String> {
        let out = c.ok("squeue", &["-h", "-o", "%A|%T|%r"])?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                Some((
                    f.first()?.trim().parse::<u64>().ok()?,
                    f.get(1)?.trim().to_string(),
                    f.get(2)?.trim().to_string(),
                ))
            })
            .filter(|(id, st, _)| marked.contains(id) && st != "COMPLETING" && st != "COMPLETED")
            .collect())
    };
    // A run that ended by itself in the milliseconds before a governor requeue reached
    // slurmctld is requeued all the same (Slurm still had it RUNNING); the governor finds that
    // in accounting and holds the job before Slurm's requeue delay would start it again. Such
    // a job is not "queued again" once it is held that way (and the governor said so). The
    // governor looks for the run in accounting for up to 90 s after the requeue (slurmdbd
    // writes asynchronously, and lags when three suites share two cores), while Slurm's 121 s
    // requeue delay keeps the job from starting: give it that long and a pass more.
    let held_by_governor = |c: &Cluster, id: u64, reason: &str| {
        reason == "JobHeldUser"
            && c.governor_log().contains(&format!(
                "job {id} held by the governor: its run had ended by itself"
            ))
    };
    let deadline = Instant::now() + Duration::from_secs(95);
    loop {
        let left: Vec<(u64, String, String)> = candidates(c)?
            .into_iter()
            .filter(|(id, _, reason)| !held_by_governor(c, *id, reason))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return Ok(left.into_iter().map(|(id, st, _)| (id, st)).collect());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Cancel what the test made and wait until nothing is left; reap the sallocs.
pub(super) fn cleanup(c: &Cluster, children: &mut Vec<Child>) -> TestResult {
    let _ = c.run("scancel", &["-u", PLAIN_USER]);
    c.cancel_submitted();
    let _ = c.run("scancel", &["-u", "root"]);
    let mut rescans = Instant::now();
    let emptied = c.wait_for("an empty queue after the adversary", 3 * MINUTE, || {
        let out = c.ok("squeue", &["-h", "-o", "%i"])?;
        if !out.trim().is_empty() && rescans.elapsed() > Duration::from_secs(3) {
            // Arrays split and sallocs granted meanwhile are cancelled too.
            let _ = c.run("scancel", &["-u", PLAIN_USER]);
            rescans = Instant::now();
        }
        Ok(out.trim().is_empty().then_some(()))
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !children.is_empty() && Instant::now() < deadline {
        children.retain_mut(|ch| matches!(ch.try_wait(), Ok(None)));
        std::thread::sleep(Duration::from_millis(200));
    }
    for ch in children.iter_mut() {
        let _ = ch.kill();
        let _ = ch.wait();
    }
    children.clear();
    emptied
}

pub(super) struct Record {
    state: String,
    start: String,
    ran: bool,
}

/// What the governor logs of a job it held because its run had ended by itself just before a
/// requeue.
pub(super) const RUN_ENDED_HOLD: &str = "held by the governor: its run had ended by itself";

/// A job that completed more than one run, with what sacct, the governor and the user say of
/// it.
pub(super) fn ran_twice_facts(
    id: u64,
    base: u64,
    n: u64,
    jobs: &BTreeMap<u64, (u64, Vec<Record>)>,
    log: &str,
    a: &Actions,
) -> String {
    let runs = jobs.get(&id).map_or_else(String::new, |(_, records)| {
        records
            .iter()
            .map(|r| format!("{} from {}", r.state, r.start))
            .collect::<Vec<_>>()
            .join(", ")
    });
    let governor: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&format!("job {id} ")))
        .collect();
    let user: Vec<&String> = [id, base]
        .iter()
        .filter_map(|j| a.touched.get(j))
        .flatten()
        .collect();
    format!("job {id} completed {n} runs; sacct: {runs}; governor: {governor:?}; user: {user:?}")
}

/// Compare each job's runs in sacct with what explains them, and the marks.
pub(super) fn compare_runs(
    c: &Cluster,
    since: &str,
    a: &Actions,
    marks: &std::path::Path,
    queued: &[(u64, String)],
) -> Result<Ending, String> {
    let mut e = Ending::default();
    let Some(first) = a.ids.iter().min().copied() else {
        return Ok(e);
    };
    let fetch = || {
        c.ok(
            "sacct",
            &[
                "-a",
                "-D",
                "-X",
                "-P",
                "-n",
                "-S",
                since,
                "-E",
                "now",
                "-o",
                "JobIDRaw,JobID,State,Start,End,NodeList",
            ],
        )
    };
    // slurmdbd writes asynchronously: wait until no job of ours is still open there.
    // The queue is empty by now; a record still open after a minute is a runaway (slurmctld
    // no longer knows the job): reported, and compared as it stands.
    let waited = Instant::now();
    let text = loop {
        let text = fetch()?;
        let open: Vec<String> = text
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split('|').collect();
                f.len() >= 3
                    && f[0].parse::<u64>().is_ok_and(|id| id >= first)
                    && matches!(f[2], "PENDING" | "RUNNING" | "SUSPENDED" | "COMPLETING")
            })
            .map(str::to_string)
            .collect();
        if open.is_empty() {
            break text;
        }
        if waited.elapsed() > MINUTE {
            e.sacct_open = open;
            break text;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    // Job id -> (the id the user named: array or heterogeneous leader, records).
    let mut jobs: BTreeMap<u64, (u64, Vec<Record>)> = BTreeMap::new();
    // Components of heterogeneous jobs (JobID `LEADER+OFFSET`): the governor acts on such a
    // job whole, through its leader, and names the leader (docs/design/heterogeneous-jobs.md).
    let mut het_components: BTreeSet<u64> = BTreeSet::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() < 6 {
            continue;
        }
        let Ok(id) = f[0].parse::<u64>() else {
            continue;
        };
        if id < first {
            continue;
        }
        let base = f[1]
            .split(['_', '+'])
            .next()
            .and_then(|b| b.parse::<u64>().ok())
            .unwrap_or(id);
        if f[1].contains('+') {
            het_components.insert(id);
        }
        // A RESIZING record closes the part of a run before its size changed (a user may
        // shrink a running job's node count); the run goes on in the next record: not a run of
        // its own.
        let ran = !matches!(f[3], "Unknown" | "None" | "")
            && f[5] != "None assigned"
            && !f[2].starts_with("RESIZING");
        let entry = jobs.entry(id).or_insert((base, Vec::new()));
        entry.1.push(Record {
            state: f[2].split(' ').next().unwrap_or("").to_string(),
            start: f[3].to_string(),
            ran,
        });
    }
    let log = c.governor_log();
    let names = |id: u64| log.contains(&format!("job {id} "));
    let governor_names =
        |id: u64, base: u64| names(id) || (het_components.contains(&id) && names(base));
    let user_requeued =
        |id: u64, base: u64| a.user_requeued.contains(&id) || a.user_requeued.contains(&base);
    e.jobs_in_sacct = jobs.len() as u64;
    for (id, (base, records)) in &mut jobs {
        records.sort_by(|x, y| x.start.cmp(&y.start));
        let runs: Vec<&Record> = records.iter().filter(|r| r.ran).collect();
        e.preempted_records += runs.iter().filter(|r| r.state == "PREEMPTED").count() as u64;
        e.runs += runs.len() as u64;
        if runs.len() < 2 {
            continue;
        }
        for r in &runs[..runs.len() - 1] {
            if r.state == "PREEMPTED" {
                e.extra_preempted += 1;
            } else if governor_names(*id, *base) {
                e.extra_governor += 1;
            } else if user_requeued(*id, *base) {
                e.extra_user += 1;
            } else {
                e.unexplained.push(format!(
                    "job {id} (submitted as {base}): runs {}",
                    runs.iter()
                        .map(|r| format!("{} from {}", r.state, r.start))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    let base_of = |id: u64| jobs.get(&id).map_or(id, |(b, _)| *b);
    let mut marked: BTreeMap<u64, u64> = BTreeMap::new();
    for l in std::fs::read_to_string(marks).unwrap_or_default().lines() {
        if let Ok(id) = l.trim().parse::<u64>() {
            *marked.entry(id).or_default() += 1;
        }
    }
    e.completed_runs = marked.values().sum();
    for (id, n) in &marked {
        if *n > 1 {
            let base = base_of(*id);
            let released_after_hold = log.contains(&format!("job {id} {RUN_ENDED_HOLD}"))
                && (a.user_released.contains(id) || a.user_released.contains(&base));
            if user_requeued(*id, base) || released_after_hold {
                e.ran_twice_user += 1;
            } else {
                e.ran_twice
                    .push(ran_twice_facts(*id, base, *n, &jobs, &log, a));
            }
        }
    }
    for (id, st) in queued {
        let base = base_of(*id);
        if !user_requeued(*id, base) {
            // The whole story, so that a rare failure can be understood from CI's output
            // alone: the runs in sacct, what the governor and the user did to it, and
            // slurmctld's lines about it.
            let n = marked.get(id).copied().unwrap_or(0);
            let (named, last) = (format!("JobId={id} "), format!("JobId={id}"));
            let ctld_log = c.slurmctld_log();
            let lines: Vec<&str> = ctld_log
                .lines()
                .filter(|l| l.contains(&named) || l.ends_with(&last))
                .collect();
            let ctld = &lines[lines.len().saturating_sub(20)..];
            e.queued_again.push(format!(
                "job {id} completed a run and is {st} again: {}; slurmctld: {ctld:?}",
                ran_twice_facts(*id, base, n, &jobs, &log, a)
            ));
        }
    }
    Ok(e)
}

pub(super) fn report(
    params: &Params,
    a: &Actions,
    s: &Sampled,
    p: &Passes,
    e: &Ending,
    admin: &admin::Admin,
    total: Duration,
) -> TestResult {
    let refused: u64 = a.refusals.values().sum();
    let mut lines: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: String| lines.push((k.to_string(), v));
    put("seed", params.seed.to_string());
    put("duration_s", format!("{:.0}", total.as_secs_f64()));
    put("submissions", a.submissions.to_string());
    put("accepted", a.accepted.to_string());
    put("refused", refused.to_string());
    put("arrays", a.arrays.to_string());
    put("hetjobs", a.hetjobs.to_string());
    put("sallocs", a.sallocs.to_string());
    put("updates", a.updates.to_string());
    put("updates_accepted", a.updates_accepted.to_string());
    put("holds_releases", a.holds.to_string());
    put("user_requeues", a.requeues_accepted.to_string());
    put("cancels", a.cancels.to_string());
    put("queue_trims", a.queue_trims.to_string());
    put("root_jobs", a.root_jobs.to_string());
    put("cross_user_tries", a.cross_user_tries.to_string());
    put("samples", s.samples.to_string());
    put("late_samples", s.late.to_string());
    put("squeue_max_ms", s.squeue_max.as_millis().to_string());
    put("samples_with_borrowing", s.borrowing_samples.to_string());
    put("overshoot_samples", s.overshoot_samples.to_string());
    put(
        "overshoot_longest_ms",
        s.overshoot_longest.as_millis().to_string(),
    );
    for (i, what) in s.overshoot_examples.iter().enumerate() {
        eprintln!("a01: above a ceiling, briefly ({i}): {what}");
    }
    for (team, peak) in &s.peak {
        put(&format!("peak_gpus_{team}"), peak.to_string());
    }
    put("governor_publications", p.publications.to_string());
    put("max_pass_gap_ms", p.max_gap.as_millis().to_string());
    put("pass_gaps_over_1s", p.gaps_over_1s.to_string());
    // A failed pass publishes nothing: it shows as a gap above; one in a row is allowed.
    put("govern_failures", e.govern_failures.len().to_string());
    for (i, line) in e.govern_failures.iter().take(5).enumerate() {
        put(&format!("govern_failure_{i}"), line.replace('=', ":"));
    }
    put("jobs_in_sacct", e.jobs_in_sacct.to_string());
    put("sacct_open_after_end", e.sacct_open.len().to_string());
    for (i, line) in e.sacct_open.iter().take(5).enumerate() {
        put(&format!("sacct_open_{i}"), line.replace('=', ":"));
    }
    put("runs", e.runs.to_string());
    put("completed_runs", e.completed_runs.to_string());
    put("preempted_runs", e.preempted_records.to_string());
    put("governor_requeues", e.governor_requeues.to_string());
    put("extra_runs_preempted", e.extra_preempted.to_string());
    put("extra_runs_governor", e.extra_governor.to_string());
    put("extra_runs_user_requeue", e.extra_user.to_string());
    put("ran_twice_by_owner", e.ran_twice_user.to_string());
    put("admin_edits_valid", admin.valid.to_string());
    put("admin_edits_invalid", admin.invalid.to_string());
    for (kind, n) in &admin.edits {
        put(&format!("admin_edit_{kind}"), n.to_string());
    }
    put("admin_refusals_plugin", admin.refused_by_plugin.to_string());
    put("admin_refusals_daemon", admin.refused_by_daemon.to_string());
    put("metrics_floods", admin.floods.to_string());
    put("metrics_flood_failures", admin.flood_failures.to_string());
    // What must be zero.
    let must: Vec<(&str, u64, Vec<String>)> = vec![
        (
            "ceiling_violations",
            s.ceiling_violations,
            s.examples.clone(),
        ),
        (
            "outside_team_gpu_samples",
            s.outside_gpu,
            s.examples.clone(),
        ),
        (
            "jobs_ran_twice",
            e.ran_twice.len() as u64,
            e.ran_twice.clone(),
        ),
        (
            "queued_again",
            e.queued_again.len() as u64,
            e.queued_again.clone(),
        ),
        (
            "unexplained_extra_runs",
            e.unexplained.len() as u64,
            e.unexplained.clone(),
        ),
        ("slurmctld_restarts", s.slurmctld_restarts, vec![]),
        ("slurmctld_down_samples", s.slurmctld_down, vec![]),
        ("slurmctld_unanswered_samples", s.squeue_failures, vec![]),
        (
            "missed_passes",
            p.over.len() as u64,
            p.over.iter().filter(|x| !x.is_empty()).cloned().collect(),
        ),
        (
            "cross_user_accepted",
            a.cross_user_accepted.len() as u64,
            a.cross_user_accepted.clone(),
        ),
        (
            "invalid_edits_not_refused",
            admin
                .invalid
                .saturating_sub(admin.refused_by_plugin.min(admin.refused_by_daemon)),
            vec![format!(
                "{} invalid edits; refused (last good kept) by the plugin {}, by the daemon {}",
                admin.invalid, admin.refused_by_plugin, admin.refused_by_daemon
            )],
        ),
        (
            "jobs_stranded_by_a_hold",
            e.stranded.len() as u64,
            e.stranded.clone(),
        ),
        (
            "runs_lost_from_the_database",
            e.runs_lost.len() as u64,
            e.runs_lost.clone(),
        ),
    ];
    for (k, v, _) in &must {
        put(k, v.to_string());
    }
    for (reason, n) in &a.refusals {
        put(&format!("refusal: {reason}"), n.to_string());
    }
    for (reason, n) in &a.update_refusals {
        put(&format!("update refusal: {reason}"), n.to_string());
    }
    for (reason, n) in &a.root_refused {
        put(&format!("root refusal: {reason}"), n.to_string());
    }
    let text: String = lines.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    for (reason, example) in &a.examples {
        eprintln!("a01: refused ({reason}): {example}");
    }
    eprintln!("a01 figures:\n{text}");
    if let Some(path) = &params.report {
        std::fs::write(path, &text)
            .map_err(|e| format!("ADVERSARY_REPORT {}: {e}", path.display()))?;
    }
    let failed: Vec<String> = must
        .iter()
        .filter(|(_, v, _)| *v > 0)
        .map(|(k, v, ex)| {
            let shown: Vec<&String> = ex.iter().take(10).collect();
            format!(
                "{k} = {v}{}",
                shown
                    .iter()
                    .map(|x| format!("\n    {x}"))
                    .collect::<String>()
            )
        })
        .collect();
    if a.accepted == 0 || e.completed_runs == 0 {
        return Err(format!(
            "the adversary got nothing to run (accepted {}, completed runs {}): the test tested nothing (seed {})",
            a.accepted, e.completed_runs, params.seed
        ));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "ADVERSARY_SEED={}: what must be zero is not:\n{}",
            params.seed,
            failed.join("\n")
        ))
    }
}
