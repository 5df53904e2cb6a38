//! The adversary: a hostile member's submissions, updates, sallocs, root jobs and tries at
//! other users' jobs, at random from the seed.

use super::*;

pub(super) fn adversary(
    c: &Cluster,
    params: &Params,
    teams: &[Team],
    script: &std::path::Path,
    children: &mut Vec<Child>,
) -> Result<Actions, String> {
    let mut rng = Rng::new(params.seed);
    let mut a = Actions::default();
    let script = script.to_string_lossy().into_owned();
    let team_names: Vec<&str> = teams.iter().map(|t| t.name.as_str()).collect();
    // The user's jobs as sbatch named them, oldest first, and root's.
    let mut mine: Vec<u64> = Vec::new();
    let mut roots: Vec<u64> = Vec::new();
    let started = Instant::now();
    let mut last_progress = Instant::now();
    let mut iteration: u64 = 0;
    let (mut last_root_check, mut last_queue_check) = (0u64, 0u64);
    let mut root_queue = 0usize;
    loop {
        if params
            .secs
            .is_some_and(|s| started.elapsed() >= Duration::from_secs(s))
        {
            break;
        }
        if params.submissions.is_some_and(|n| a.submissions >= n) {
            break;
        }
        iteration += 1;
        children.retain_mut(|ch| matches!(ch.try_wait(), Ok(None)));

        // Root's churn of ordinary team jobs: borrowing, reclaim and displacement happen.
        if iteration - last_root_check >= 4 {
            last_root_check = iteration;
            root_queue = c
                .ok("squeue", &["-h", "-u", "root", "-o", "%A"])
                .map(|o| o.lines().count())
                .unwrap_or(root_queue);
        }
        if root_queue < 12 && rng.chance(45) {
            root_job(c, &mut rng, &team_names, &script, &mut a, &mut roots);
            root_queue += 1;
        }
        // Keep the user's queue bounded (the soak submits 10,000 jobs).
        if iteration - last_queue_check >= 10 {
            last_queue_check = iteration;
            let queued = c
                .ok("squeue", &["-h", "-u", PLAIN_USER, "-o", "%A"])
                .map(|o| o.lines().count())
                .unwrap_or(0);
            if queued > params.max_queue {
                let oldest: Vec<String> = mine
                    .drain(..mine.len().min(20))
                    .map(|i| i.to_string())
                    .collect();
                let mut args: Vec<&str> = vec!["--quiet"];
                args.extend(oldest.iter().map(String::as_str));
                let _ = c.run_as_user("scancel", &args);
                a.queue_trims += 1;
            }
        }

        let roll = rng.below(100);
        match roll {
            0..=39 => submit(c, &mut rng, &team_names, &script, &mine, &mut a)
                .map(|id| mine.extend(id))?,
            40..=43 => salloc(c, &mut rng, &team_names, children, &mut a)?,
            44..=73 => {
                if let Some(id) = target(&mut rng, &mine) {
                    update(c, &mut rng, &team_names, id, &mine, &mut a)?;
                }
            }
            74..=79 => {
                if let Some(id) = target(&mut rng, &mine) {
                    let verb = *rng.pick(&["hold", "uhold", "release", "release", "release"]);
                    let out = c.run_as_user("scontrol", &[verb, &id.to_string()])?;
                    a.holds += 1;
                    if verb == "release" {
                        a.user_released.insert(id);
                    }
                    a.touch(id, format!("{verb}: exit {}", out.status));
                }
            }
            80..=83 => {
                if let Some(id) = target(&mut rng, &mine) {
                    let verb = *rng.pick(&["requeue", "requeue", "requeuehold"]);
                    let out = c.run_as_user("scontrol", &[verb, &id.to_string()])?;
                    if out.status.success() {
                        a.requeues_accepted += 1;
                    }
                    // Counted whatever scontrol's exit status: on an array it requeues the
                    // tasks it can (finished ones too) and fails for the others (seen in the
                    // soak: tasks 1100 and 1101 of array 1098 requeued after they completed,
                    // scontrol exiting 1 for the array's pending tasks).
                    a.user_requeued.insert(id);
                    a.touch(id, format!("{verb}: exit {}", out.status));
                }
            }
            84..=91 => {
                if let Some(id) = target(&mut rng, &mine) {
                    let _ = c.run_as_user("scancel", &[&id.to_string()])?;
                    a.cancels += 1;
                }
            }
            92..=94 => {
                if let Some(id) = target(&mut rng, &roots) {
                    cross_user(c, &mut rng, &team_names, id, &mut a)?;
                }
            }
            _ => std::thread::sleep(Duration::from_millis(rng.range(100, 600))),
        }
        if last_progress.elapsed() >= MINUTE {
            last_progress = Instant::now();
            eprintln!(
                "a01: {:.0} s: {} submissions, {} accepted, {} updates, {} root jobs",
                started.elapsed().as_secs_f64(),
                a.submissions,
                a.accepted,
                a.updates,
                a.root_jobs
            );
        }
        std::thread::sleep(params.pace);
    }
    a.ids.extend(mine.iter().chain(roots.iter()));
    Ok(a)
}

/// A job to act on: mostly a recent one (likely still queued), sometimes any.
pub(super) fn target(rng: &mut Rng, ids: &[u64]) -> Option<u64> {
    if ids.is_empty() {
        return None;
    }
    let n = ids.len() as u64;
    let i = if rng.chance(75) {
        n - 1 - rng.below(n.min(15))
    } else {
        rng.below(n)
    };
    Some(ids[i as usize])
}

/// A GPU count as a user might write it, absurd ones included.
pub(super) fn gpu_count(rng: &mut Rng) -> String {
    match rng.below(20) {
        0 => rng
            .pick(&[
                "1t",
                "2p",
                "1k",
                "3g",
                "99999999",
                "4294967295",
                "18446744073709551615",
                "-1",
                "0",
                "abc",
                "1.5",
                "",
                "0x10",
                "1m",
            ])
            .to_string(),
        1 | 2 => rng.range(5, 9).to_string(),
        3 => rng.range(10, 16).to_string(),
        _ if rng.chance(55) => "1".into(),
        _ => rng.range(2, 4).to_string(),
    }
}

/// The GPU part of a request, in every form sbatch and salloc take.
pub(super) fn gpu_form(rng: &mut Rng) -> Vec<String> {
    let n = gpu_count(rng);
    let types = ["h100", "a100", "default", "tesla", "gpu"];
    match rng.below(18) {
        0 | 1 => vec![],
        2..=5 => vec![format!("--gres=gpu:{n}")],
        6 | 7 => vec![format!("--gpus={n}")],
        8 => vec![
            format!("--gpus-per-node={n}"),
            format!("--nodes={}", rng.range(1, 2)),
        ],
        9 => vec![
            format!("--gpus-per-task={n}"),
            format!("--ntasks={}", rng.range(1, 4)),
        ],
        10 => vec![format!("--gres=gpu:{}:{n}", rng.pick(&types))],
        11 => vec![format!("--gpus={}:{n}", rng.pick(&types))],
        12 => vec![rng
            .pick(&[
                "--gres=gpu",
                "--gres=gpu:1,gpu:2",
                "--gres=mps:1",
                "--gres=gpu:1:2",
                "--gres=nvidia:1",
                "--gres=gpu:1(S:0)",
                "--gres=,",
                "--gpus=,",
                "--gres=gpu:",
                "--tres-per-task=gres:gpu:1",
            ])
            .to_string()],
        13 => vec![format!("--gres=gpu:{n}"), "--exclusive".into()],
        14 => vec![
            format!("--gres=gpu:{n}"),
            format!("--cpus-per-gpu={}", rng.range(1, 4)),
        ],
        // Issue 25, finding 8: GPUs per socket, with or without a socket count.
        15 => {
            let mut v = vec![format!("--gpus-per-socket={n}")];
            if rng.chance(70) {
                v.push(format!("--sockets-per-node={}", rng.range(1, 2)));
            }
            v
        }
        // Issue 25, finding 7: a whole node without naming GPUs.
        16 => vec!["--exclusive".into()],
        _ => vec![
            format!("--gres=gpu:{n}"),
            format!("--nodes={}", rng.range(1, 3)),
        ],
    }
}

pub(super) fn account(rng: &mut Rng, teams: &[&str]) -> Option<String> {
    match rng.below(100) {
        0..=69 => Some(rng.pick(teams).to_string()),
        70..=77 => Some(OUTSIDE.into()),
        78..=81 => Some("nosuchteam".into()),
        82..=84 => Some("root".into()),
        _ => None,
    }
}

pub(super) fn qos(rng: &mut Rng) -> Option<String> {
    match rng.below(100) {
        0..=39 => None,
        40..=84 => Some(
            rng.pick(&["inference", "standard", "experiment"])
                .to_string(),
        ),
        85..=89 => Some("teamshare".into()),
        90..=94 => Some("normal".into()),
        _ => Some(
            rng.pick(&["junk-qos", "INFERENCE", "standard,experiment", ""])
                .to_string(),
        ),
    }
}

/// One component: account, partition, GPUs, class.
pub(super) fn component(rng: &mut Rng, teams: &[&str]) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(acct) = account(rng, teams) {
        args.push(format!("--account={acct}"));
    }
    match rng.below(100) {
        0..=89 => args.push("--partition=gpu".into()),
        90..=92 => args.push("--partition=nosuch".into()),
        _ => {}
    }
    args.extend(gpu_form(rng));
    if let Some(q) = qos(rng) {
        args.push(format!("--qos={q}"));
    }
    args
}

/// The sleep of a job: mostly short, now and then long enough to be reclaimed.
pub(super) fn sleep_secs(rng: &mut Rng) -> u64 {
    if rng.chance(20) {
        rng.range(15, 40)
    } else {
        rng.range(1, 8)
    }
}

/// The options besides the request, in the first component.
pub(super) fn extras(rng: &mut Rng, known: &[u64]) -> Vec<String> {
    let mut args = Vec::new();
    if rng.chance(10) {
        args.push(format!("--begin=now+{}", rng.range(1, 30)));
    }
    if rng.chance(8) {
        args.push("--hold".into());
    }
    if rng.chance(20) {
        args.push(format!("--time={}", rng.range(1, 5)));
    }
    if rng.chance(10) {
        args.push(rng.pick(&["--requeue", "--no-requeue"]).to_string());
    }
    if rng.chance(5) {
        args.push(
            rng.pick(&["--nice=100", "--nice=-100", "--nice=2147483647"])
                .to_string(),
        );
    }
    if rng.chance(3) {
        args.push(
            rng.pick(&["--priority=1", "--priority=4294967294", "--priority=TOP"])
                .to_string(),
        );
    }
    if rng.chance(5) {
        if let Some(id) = known.last() {
            args.push(format!(
                "--dependency={}:{id}",
                rng.pick(&["afterok", "afterany", "afternotok", "singleton"])
            ));
        }
    }
    if rng.chance(3) {
        args.push(
            rng.pick(&["--site-factor=1000", "--deadline=now+60", "--overcommit"])
                .to_string(),
        );
    }
    args
}

/// Why a submission or an update was refused: teamshare's one-line reason up to its first ';',
/// or Slurm's own error; numbers as N, so that reasons group.
pub(super) fn refusal_reason(stderr: &str) -> String {
    let text = match stderr
        .lines()
        .find_map(|l| l.find("teamshare: ").map(|i| &l[i..]))
    {
        Some(t) => t.split(';').next().unwrap_or(t),
        None => {
            let line = stderr
                .lines()
                .map(str::trim)
                .rfind(|l| l.contains("error:") || l.contains("rror"))
                .or_else(|| stderr.lines().map(str::trim).find(|l| !l.is_empty()))
                .unwrap_or("(no message)");
            line.rsplit("error: ").next().unwrap_or(line)
        }
    };
    let mut out = String::new();
    let mut in_number = false;
    for ch in text.trim().chars() {
        if ch.is_ascii_digit() {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(ch);
        }
    }
    if out.chars().count() > 100 {
        out = out.chars().take(100).collect::<String>() + "...";
    }
    out.replace('|', "/")
}

/// A batch submission as tsuser; returns the job id when sbatch accepted it.
pub(super) fn submit(
    c: &Cluster,
    rng: &mut Rng,
    teams: &[&str],
    script: &str,
    known: &[u64],
    a: &mut Actions,
) -> Result<Option<u64>, String> {
    let mut args = component(rng, teams);
    args.extend(extras(rng, known));
    let kind = rng.below(100);
    if kind < 8 {
        let n = rng.range(2, 20);
        args.push(format!("--array=1-{n}%{}", rng.range(1, 4)));
        a.arrays += 1;
    } else if kind < 16 {
        args.push(":".into());
        args.extend(component(rng, teams));
        a.hetjobs += 1;
    }
    args.push(script.to_string());
    args.push(sleep_secs(rng).to_string());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    a.submissions += 1;
    match c.sbatch_as_user(&refs) {
        Ok(id) => match id.parse::<u64>() {
            Ok(id) => {
                a.accepted += 1;
                Ok(Some(id))
            }
            Err(_) => {
                *a.refusals
                    .entry(format!("sbatch printed no job id ({id:?})"))
                    .or_default() += 1;
                Ok(None)
            }
        },
        Err(stderr) => {
            let reason = refusal_reason(&stderr);
            a.examples
                .entry(format!("sbatch: {reason}"))
                .or_insert_with(|| refs.join(" "));
            *a.refusals.entry(reason).or_default() += 1;
            Ok(None)
        }
    }
}

/// An interactive allocation (`salloc --no-shell`), started and not waited for.
pub(super) fn salloc(
    c: &Cluster,
    rng: &mut Rng,
    teams: &[&str],
    children: &mut Vec<Child>,
    a: &mut Actions,
) -> TestResult {
    if children.len() >= 6 {
        return Ok(());
    }
    let mut args = component(rng, teams);
    args.extend([
        "--no-shell".into(),
        "-Q".into(),
        format!("--time={}", rng.range(1, 2)),
    ]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    children.push(c.spawn_as_user("salloc", &refs)?);
    a.sallocs += 1;
    Ok(())
}

/// One `scontrol update` of fields a user may touch (and some a user may not).
pub(super) fn update_field(rng: &mut Rng, teams: &[&str], known: &[u64]) -> String {
    match rng.below(24) {
        0 | 1 => format!("TresPerNode=gres:gpu:{}", gpu_count(rng)),
        2 | 3 => format!("TresPerJob=gres:gpu:{}", gpu_count(rng)),
        4 => format!("TresPerTask=gres:gpu:{}", gpu_count(rng)),
        5 => format!("NumNodes={}", rng.range(0, 3)),
        6 => format!("NumTasks={}", rng.range(1, 8)),
        7 | 8 => format!(
            "Account={}",
            account(rng, teams).unwrap_or_else(|| "".into())
        ),
        9 => format!("Partition={}", rng.pick(&["gpu", "gpu", "nosuch", ""])),
        10 => format!("QOS={}", qos(rng).unwrap_or_default()),
        11 => "qos=".into(),
        12 => format!("Priority={}", rng.pick(&["1", "1000", "4294967294", "0"])),
        13 => format!(
            "StartTime={}",
            rng.pick(&["now", "now+5", "now+30", "now+1hour", "2000-01-01T00:00:00"])
        ),
        14 => format!(
            "TimeLimit={}",
            rng.pick(&["1", "2", "5", "UNLIMITED", "+1", "-1", "0:30"])
        ),
        15 => format!("Name=adv{}", rng.below(1000)),
        16 => format!("Comment=adversary-{}", rng.below(1000)),
        17 => match known.get(rng.below(known.len() as u64) as usize) {
            Some(id) if rng.chance(70) => format!("Dependency=afterany:{id}"),
            _ => "Dependency=".into(),
        },
        18 => format!("Nice={}", rng.pick(&["100", "-100", "0"])),
        19 => format!("Gres=gpu:{}", gpu_count(rng)),
        20 => format!(
            "{}=n{}",
            rng.pick(&["ReqNodeList", "ExcNodeList"]),
            rng.range(1, 2)
        ),
        21 => format!("Requeue={}", rng.range(0, 1)),
        22 => format!("ArrayTaskThrottle={}", rng.range(0, 8)),
        // The whole request, as teamshare's refusal of a partial one suggests.
        _ => format!(
            "Account={} TresPerJob=gres:gpu:{} TresPerNode= TresPerTask= TresPerSocket=",
            rng.pick(teams),
            gpu_count(rng)
        ),
    }
}

pub(super) fn update(
    c: &Cluster,
    rng: &mut Rng,
    teams: &[&str],
    id: u64,
    known: &[u64],
    a: &mut Actions,
) -> TestResult {
    let mut args = vec!["update".to_string(), format!("jobid={id}")];
    for _ in 0..rng.range(1, 3) {
        args.extend(
            update_field(rng, teams, known)
                .split(' ')
                .map(str::to_string),
        );
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = c.run_as_user("scontrol", &refs)?;
    a.updates += 1;
    a.touch(id, format!("{}: exit {}", refs[2..].join(" "), out.status));
    if out.status.success() {
        a.updates_accepted += 1;
    } else {
        let reason = refusal_reason(&String::from_utf8_lossy(&out.stderr));
        a.examples
            .entry(format!("scontrol: {reason}"))
            .or_insert_with(|| refs.join(" "));
        *a.update_refusals.entry(reason).or_default() += 1;
    }
    Ok(())
}

/// tsuser acting on root's job: Slurm must refuse every one.
pub(super) fn cross_user(
    c: &Cluster,
    rng: &mut Rng,
    teams: &[&str],
    id: u64,
    a: &mut Actions,
) -> TestResult {
    let id_s = id.to_string();
    let jobid = format!("jobid={id}");
    let account = format!("Account={}", rng.pick(teams));
    let args: Vec<&str> = match rng.below(5) {
        0 => vec!["hold", &id_s],
        1 => vec!["requeue", &id_s],
        2 => vec!["update", &jobid, "TimeLimit=1"],
        3 => vec!["update", &jobid, &account],
        _ => vec!["update", &jobid, "Priority=1"],
    };
    a.cross_user_tries += 1;
    let out = c.run_as_user("scontrol", &args)?;
    if out.status.success() {
        a.cross_user_accepted
            .push(format!("scontrol {} (root's job)", args.join(" ")));
    }
    Ok(())
}

/// An ordinary team job of root's: 1 or 2 GPUs, any class, a few seconds.
pub(super) fn root_job(
    c: &Cluster,
    rng: &mut Rng,
    teams: &[&str],
    script: &str,
    a: &mut Actions,
    roots: &mut Vec<u64>,
) {
    let team = rng.pick(teams).to_string();
    let gpus = match rng.below(20) {
        0..=13 => 1,
        14..=18 => 2,
        _ => 3,
    };
    let class = rng.pick(&[
        "inference",
        "standard",
        "standard",
        "experiment",
        "experiment",
    ]);
    let secs = rng.range(4, 20).to_string();
    let args = [
        "-A".to_string(),
        team,
        "-p".into(),
        "gpu".into(),
        format!("--gres=gpu:{gpus}"),
        format!("--qos={class}"),
        script.to_string(),
        secs,
    ];
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    match c.sbatch(&refs) {
        Ok(id) => {
            a.root_jobs += 1;
            if let Ok(id) = id.parse() {
                roots.push(id);
            }
        }
        Err(e) => *a.root_refused.entry(refusal_reason(&e)).or_default() += 1,
    }
}
