//! Slurm's job records as the governor reads them ([`Records`]: typed from libslurm by
//! [`crate::slurm_api`], or from the text of `squeue -O <fields>`): jobs with their GPUs, how
//! to name each to Slurm, Slurm's reasons, and the holds the governor placed. No record a
//! user can write fails a pass: what cannot be read is returned apart.

use std::collections::BTreeMap;
use std::time::Duration;

use teamshare_config::SHARE_TYPE;
use teamshare_policy::array;
use teamshare_policy::governance::{self, ClusterJob, Phase};
use teamshare_policy::gres::{gpu_count, shard_count, GpuCount};
use teamshare_policy::submit::{gpus_requested, shares_requested, GpuAsk};

pub use crate::job_record::{JobRecord, JobState, Records};
use crate::job_record::{Origin, TresAsk};
use crate::parsable::{self, MalformedLine, Shape};
use crate::period::{self, UnixSeconds};
use crate::slurm_cli::SlurmCommand;

/// How long a squeue run (the governor's reads of jobs) may take.
pub const SQUEUE_TIMEOUT: Duration = Duration::from_secs(20);

/// squeue for the governed partitions: every field the plan needs, `|`-separated.
pub fn squeue_command(partitions: &[String]) -> SlurmCommand {
    SlurmCommand::new(
        "squeue",
        vec![
            "-h".into(),
            "-a".into(),
            "-p".into(),
            partitions.join(","),
            "-t".into(),
            "PD,R,CG,S".into(),
            "-O".into(),
            format!(
                "{SQUEUE_FIELDS_BEFORE_WHOLE_NODE}{}:|,HetJobID:|,HetJobOffset:|,SchedNodes:|,admin_comment:|",
                slurm_sys::SQUEUE_WHOLE_NODE.0
            ),
        ],
        SQUEUE_TIMEOUT,
    )
}

/// The governor's squeue fields up to the one that tells a whole-node job (its name is the
/// release's: [`slurm_sys::SQUEUE_WHOLE_NODE`]), which the AdminComment follows.
const SQUEUE_FIELDS_BEFORE_WHOLE_NODE: &str = "JobID:|,Account:|,State:|,PriorityLong:|,SubmitTime:|,StartTime:|,tres-alloc:|,tres-per-job:|,tres-per-node:|,tres-per-task:|,NumNodes:|,NumTasks:|,Reason:|,BatchFlag:|,NodeList:|,EligibleTime:|,ArrayJobID:|,ArrayTaskID:|,tres-per-socket:|,Sockets:|,";
/// The last field (AdminComment) is everything after the 24th separator: an administrator may
/// write `|` into it.
const SQUEUE_FIELD_COUNT: usize = 25;

/// The components of heterogeneous jobs that stay jobs of their own in the plan (their
/// components differ in team or GPU type), each with its leader's id: Slurm requeues, cancels
/// and holds a heterogeneous job only whole, through its leader (`scontrol requeue` of
/// another component fails: "Job not heterogeneous job leader", job_mgr.c, 22.05).
pub type Leaders = BTreeMap<u64, u64>;

/// The name under which job `id` is requeued, cancelled or held whole: its heterogeneous
/// job's leader for a component of one ([`Leaders`]), else its [`address`].
pub fn whole_address(addresses: &Addresses, leaders: &Leaders, id: u64) -> Option<String> {
    match leaders.get(&id) {
        Some(leader) => Some(leader.to_string()),
        None => address(addresses, id),
    }
}

/// How the governor names a job to scontrol and scancel. A plain id is not enough for job
/// arrays: slurmctld applies an update, requeue or cancel of an array's own id to *every*
/// task of the array (update_job_str in job_mgr.c, 22.05), running and ended ones included,
/// and the record of an array's pending tasks carries that id. So a task is named
/// `ARRAY_TASK` and the pending record `ARRAY_[tasks]` (all its tasks: slurmctld then updates
/// the record whole, without splitting it into one record per task).
pub type Addresses = BTreeMap<u64, String>;

/// The name of job `id` for scontrol and scancel (see [`Addresses`]); `None` for an array
/// record whose tasks could not be read or listed, which is never acted on.
pub fn address(addresses: &Addresses, id: u64) -> Option<String> {
    match addresses.get(&id) {
        Some(a) if a.is_empty() => None,
        Some(a) => Some(a.clone()),
        None => Some(id.to_string()),
    }
}

/// The records of squeue's text with the governor's fields ([`squeue_command`]; times are
/// UTC). A line fails only when it has too few fields or no job id; every other field that
/// does not read is left for the reader to judge.
pub fn squeue_records(text: &str) -> Records {
    let items = parsable::lines(text)
        .map(|(number, line)| from_squeue_line(number, line))
        .collect();
    Records { items }
}

/// Fields squeue prints as "none".
fn na(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty() && s != "N/A" && s != "(null)").then(|| s.to_string())
}

/// The job id of squeue's JobID field. Running array tasks print their own job id; pending
/// tasks of an array share one record (12_[4-9] in other formats), named by its id.
fn squeue_job_id(field: &str) -> Option<u64> {
    field
        .trim()
        .split(['_', '+'])
        .next()
        .and_then(|s| s.parse::<u64>().ok())
}

/// One line of squeue's text (see [`squeue_records`]).
fn from_squeue_line(number: usize, line: &str) -> Result<JobRecord, MalformedLine> {
    let bad = |reason: &str| MalformedLine::new("squeue", number, reason, line);
    let f: [&str; SQUEUE_FIELD_COUNT] =
        parsable::fields(line, Shape::Rest).map_err(|e| bad(&e.to_string()))?;
    let id = squeue_job_id(f[0]).ok_or_else(|| bad("bad job id"))?;
    let het = match (f[21].trim().parse::<u64>(), f[22].trim().parse::<u32>()) {
        (Ok(leader), Ok(offset)) => Some((leader, offset)),
        _ => None,
    };
    Ok(JobRecord {
        id,
        account: f[1].trim().to_string(),
        state: JobState::from_name(f[2]),
        priority: f[3].trim().parse().ok(),
        submit: parse_utc(f[4]),
        start: parse_utc(f[5]),
        tres_alloc: f[6].trim().to_string(),
        ask: TresAsk {
            per_job: na(f[7]),
            per_node: na(f[8]),
            per_task: na(f[9]),
            per_socket: na(f[18]),
            sockets_per_node: f[19].trim().parse().ok(),
        },
        num_nodes: f[10].trim().parse().ok(),
        num_tasks: f[11].trim().parse().ok(),
        reason: f[12].trim().to_string(),
        batch: f[13].trim() != "0",
        node_list: f[14].trim().to_string(),
        eligible_time: parse_utc(f[15]),
        array_job_id: f[16].trim().parse().ok(),
        array_task: na(f[17]),
        whole_node: f[20].trim() == slurm_sys::SQUEUE_WHOLE_NODE.1,
        het,
        sched_nodes: f[23].trim().to_string(),
        admin_comment: f[24].to_string(),
        gres_detail: Vec::new(),
        origin: Origin::Line(number, line.to_string()),
    })
}

/// A squeue line (or libslurm record) the governor could not read, and what it did with its
/// job.
pub type Unreadable = MalformedLine;

/// Read squeue's output (times are UTC: Slurm clients run with TZ=UTC).
///
/// No line fails the pass: users write most of what squeue prints (any value Slurm accepts,
/// at submit or by `scontrol update`), and one job must not stop governance for everyone. A
/// line that cannot be read is returned apart; a pending job whose GPU request cannot be read
/// is kept with [`governance::UNREADABLE_GPUS`] (never in quota, never given an allowance).
pub fn parse_squeue(text: &str, now: UnixSeconds) -> (Vec<ClusterJob>, Vec<Unreadable>) {
    let read = read_squeue(text, now, 0);
    (read.jobs, read.unreadable)
}

/// What [`read_records`] read.
#[derive(Debug, Default)]
pub struct SqueueRead {
    pub jobs: Vec<ClusterJob>,
    pub unreadable: Vec<Unreadable>,
    pub addresses: Addresses,
    pub leaders: Leaders,
}

/// [`read_records`] of squeue's text ([`squeue_records`]).
pub fn read_squeue(text: &str, now: UnixSeconds, node_gpus: u32) -> SqueueRead {
    read_records(&squeue_records(text), now, node_gpus)
}

/// The plan's jobs of Slurm's records (see [`parse_squeue`]), with how to name each job to
/// Slurm ([`Addresses`]: only the jobs that are not named by their plain id).
///
/// A heterogeneous job is judged as one job (issue 25, finding 11): its components, which
/// Slurm starts, requeues and cancels together, are one job of the plan under its leader's id
/// when they are of one team and one GPU type (`scontrol update` of the leader's id updates
/// every component). Components of several teams or types stay jobs of their own, each counted
/// in its team and type, and are acted on whole through their leader ([`Leaders`]).
///
/// `node_gpus` is the most GPUs a usable node has: a pending job that asked for whole nodes
/// (`--exclusive`) is given every GPU of each, so it asks for at least that many per node
/// (issue 25, finding 7).
pub fn read_records(records: &Records, now: UnixSeconds, node_gpus: u32) -> SqueueRead {
    read_records_with(records, now, node_gpus, false)
}

/// [`read_records`]; with `shares` (the configuration governs `gres/shard`, issue 30), a job
/// holding or asking for shards and no GPU is a job of that many GPUs of type
/// [`SHARE_TYPE`]. Without, it holds no GPU, as before.
pub fn read_records_with(
    records: &Records,
    now: UnixSeconds,
    node_gpus: u32,
    shares: bool,
) -> SqueueRead {
    let mut jobs: Vec<ClusterJob> = Vec::new();
    let mut unreadable = Vec::new();
    let mut pending_ids = std::collections::BTreeSet::new();
    let mut arrays = ArrayRecords::default();
    let mut hets: BTreeMap<u64, Vec<(u32, usize)>> = BTreeMap::new();
    for item in &records.items {
        let r = match item {
            Ok(r) => r,
            Err(e) => {
                unreadable.push(e.clone());
                continue;
            }
        };
        let mut bad = |reason: &str| unreadable.push(r.unreadable(reason));
        let phase = match r.state {
            JobState::Pending => Phase::Pending,
            // Completing and suspended jobs still hold their GPUs.
            JobState::Running | JobState::Completing | JobState::Suspended => Phase::Running,
            JobState::Other => continue,
        };
        let mut job = record_job(r, phase, now, shares, &mut bad);
        if phase == Phase::Pending && r.whole_node && job.gpus != governance::UNREADABLE_GPUS {
            job.gpus = job
                .gpus
                .max(job.node_count.max(1).saturating_mul(node_gpus));
        }
        // Pending array tasks share one record: counted once here.
        if phase == Phase::Pending && !pending_ids.insert(r.id) {
            continue;
        }
        job.tasks = arrays.note(r, phase, jobs.len(), &mut bad);
        if let Some((leader, offset)) = r.het {
            hets.entry(leader).or_default().push((offset, jobs.len()));
        }
        jobs.push(job);
    }
    arrays.throttle(&mut jobs);
    let leaders = merge_het_jobs(&mut jobs, hets);
    SqueueRead {
        jobs,
        unreadable,
        addresses: arrays.addresses,
        leaders,
    }
}

/// Judge each heterogeneous job as one (see [`read_records`]): `hets` are the components of
/// each leader id (offset, index in `jobs`). Components of one team and one GPU type become
/// their leader's job; the others stay and are returned with their leader.
fn merge_het_jobs(jobs: &mut Vec<ClusterJob>, hets: BTreeMap<u64, Vec<(u32, usize)>>) -> Leaders {
    let mut leaders = Leaders::new();
    let mut merged = std::collections::BTreeSet::new();
    for (leader, mut parts) in hets {
        parts.sort_unstable();
        let Some(&(0, head)) = parts.first() else {
            // The leader is not in this read (it ended a moment ago): act through it anyway.
            leaders.extend(parts.iter().map(|(_, i)| (jobs[*i].id, leader)));
            continue;
        };
        let rest: Vec<usize> = parts[1..].iter().map(|(_, i)| *i).collect();
        let one_job = rest.iter().all(|i| {
            jobs[*i].team == jobs[head].team
                && jobs[*i].gpu_type == jobs[head].gpu_type
                && jobs[*i].phase == jobs[head].phase
        });
        if !one_job {
            leaders.extend(rest.iter().map(|i| (jobs[*i].id, leader)));
            continue;
        }
        for i in rest {
            let part = jobs[i].clone();
            let whole = &mut jobs[head];
            whole.gpus = if whole.gpus == governance::UNREADABLE_GPUS
                || part.gpus == governance::UNREADABLE_GPUS
            {
                governance::UNREADABLE_GPUS
            } else {
                whole.gpus.saturating_add(part.gpus)
            };
            for node in part.nodes {
                if !whole.nodes.contains(&node) {
                    whole.nodes.push(node);
                }
            }
            whole.node_count = whole.node_count.saturating_add(part.node_count);
            whole.eligible &= part.eligible;
            whole.completing |= part.completing;
            merged.insert(i);
        }
    }
    if !merged.is_empty() {
        let mut index = 0;
        jobs.retain(|_| {
            let keep = !merged.contains(&index);
            index += 1;
            keep
        });
    }
    leaders
}

/// The job of one record (`tasks` 1: an array record's are counted by
/// [`ArrayRecords::note`]). What cannot be read is told to `bad` and taken as the governor can
/// live with.
fn record_job(
    r: &JobRecord,
    phase: Phase,
    now: UnixSeconds,
    shares: bool,
    mut bad: impl FnMut(&str),
) -> ClusterJob {
    let priority = r.priority.unwrap_or_else(|| {
        bad("bad priority (ranked as no class)");
        1
    });
    let submit = r.submit.unwrap_or_else(|| {
        bad("bad submit time (taken as now)");
        now
    });
    let (gpus, gpu_type) = record_gpus(r, phase, shares, bad);
    // Held by teamshare's parking: priority 0 and teamshare's mark, which only an
    // administrator (or the governor) can write.
    let park_held = phase == Phase::Pending
        && priority == 0
        && r.admin_comment
            .trim()
            .starts_with(governance::PARK_HOLD_MARK);
    ClusterJob {
        id: r.id,
        gpu_type,
        team: r.account.clone(),
        phase,
        gpus,
        priority,
        submit,
        start: if phase == Phase::Running {
            r.start
        } else {
            None
        },
        // A pending job can start now when its eligible time has come (Slurm gives the
        // begin time there, none while a dependency is unmet) and its reason says nothing
        // else. The reason alone is not enough: Slurm resets it to None when a job's
        // priority is updated, until its scheduler looks at the job again.
        // A job teamshare holds shows the hold as its reason: its begin time alone says
        // whether it could start once released.
        eligible: phase == Phase::Running
            || ((park_held || eligible_reason(&r.reason))
                && r.eligible_time.is_some_and(|t| t <= now)),
        // A begin time this far ahead is teamshare's parking.
        parked: phase == Phase::Pending
            && r.eligible_time
                .is_some_and(|b| b - now >= governance::PARKED_AFTER_SECS),
        park_held,
        batch: r.batch,
        nodes: match phase {
            Phase::Running => expand_hostlist(r.node_list.trim()).unwrap_or_default(),
            // The nodes Slurm's backfill reserved for it, where it made a reservation.
            Phase::Pending => planned_nodes(&r.sched_nodes),
        },
        node_count: r.num_nodes.unwrap_or(0),
        completing: r.state == JobState::Completing,
        tasks: 1,
    }
}

/// The GPUs of a record and their type where there is one: a running job's allocation, a
/// pending job's request.
fn record_gpus(
    r: &JobRecord,
    phase: Phase,
    shares: bool,
    mut bad: impl FnMut(&str),
) -> (u32, Option<String>) {
    if phase == Phase::Running {
        return match gpu_count(&r.tres_alloc) {
            Ok(c) if c.is_zero() && shares => match shard_count(&r.tres_alloc) {
                Ok(0) | Err(_) => (0, None),
                Ok(n) => (
                    u32::try_from(n).unwrap_or(u32::MAX),
                    Some(SHARE_TYPE.to_string()),
                ),
            },
            Ok(c) => (u32::try_from(c.total).unwrap_or(u32::MAX), one_type(&c)),
            Err(e) => {
                // Slurm writes the allocation itself; counted as none rather than stop.
                bad(&format!("{e} (running job counted without GPUs)"));
                (0, None)
            }
        };
    }
    let ask = GpuAsk {
        tres_per_job: r.ask.per_job.clone(),
        tres_per_node: r.ask.per_node.clone(),
        tres_per_task: r.ask.per_task.clone(),
        // Read like every other form the plugin accepts (issue 25, finding 8: a job asking
        // GPUs per socket read as none).
        tres_per_socket: r.ask.per_socket.clone(),
        min_nodes: r.num_nodes,
        num_tasks: r.num_tasks,
        ntasks_per_node: None,
        sockets_per_node: r.ask.sockets_per_node,
    };
    let asked = if shares {
        shares_requested(&ask)
    } else {
        gpus_requested(&ask)
    };
    match asked {
        Ok(c) => (
            u32::try_from(c.total).unwrap_or(governance::UNREADABLE_GPUS),
            one_type(&c),
        ),
        Err(e) => {
            bad(&format!("{e} (job treated as never fitting)"));
            (governance::UNREADABLE_GPUS, None)
        }
    }
}

/// The job arrays of one squeue read. A task is named `ARRAY_TASK`, the record of the pending
/// tasks `ARRAY_[tasks]`, and that record stands for as many tasks as may start.
#[derive(Default)]
struct ArrayRecords {
    /// Array id -> (running tasks, the throttle of its pending record, that record's index).
    arrays: BTreeMap<u64, (u32, Option<u32>, Option<usize>)>,
    addresses: Addresses,
}

impl ArrayRecords {
    /// Note the job of record `r`, about to be pushed as job `index`: its address if it is
    /// of an array, and the tasks it stands for (1 but for an array's pending record).
    fn note(
        &mut self,
        r: &JobRecord,
        phase: Phase,
        index: usize,
        mut bad: impl FnMut(&str),
    ) -> u32 {
        let id = r.id;
        let (Some(array_id), Some(spec)) = (r.array_job_id, r.array_task.as_deref()) else {
            return 1;
        };
        let entry = self.arrays.entry(array_id).or_insert((0, None, None));
        if let Ok(task) = spec.parse::<u64>() {
            self.addresses.insert(id, format!("{array_id}_{task}"));
            if phase == Phase::Running {
                entry.0 += 1;
            }
            return 1;
        }
        let Some(t) = array::parse_tasks(spec) else {
            bad("bad array task list (counted as one task, never updated)");
            self.addresses.insert(id, String::new());
            return 1;
        };
        entry.1 = t.throttle;
        entry.2 = Some(index);
        match t.ranges {
            Some(r) => {
                self.addresses.insert(id, format!("{array_id}_[{r}]"));
            }
            None => {
                bad("array task list too long to name (its record is counted, never updated)");
                self.addresses.insert(id, String::new());
            }
        }
        u32::try_from(t.count).unwrap_or(u32::MAX).max(1)
    }

    /// A throttled array (`%N`) starts at most N tasks at once: its pending record stands for
    /// what its running tasks leave of N.
    fn throttle(&self, jobs: &mut [ClusterJob]) {
        for (running, throttle, record) in self.arrays.values() {
            if let (Some(n), Some(i)) = (throttle, record) {
                let may_start = n.saturating_sub(*running);
                if let Some(j) = jobs.get_mut(*i) {
                    j.tasks = j.tasks.min(may_start).max(1);
                    // Throttled to the tasks already running: none can start now.
                    j.eligible &= may_start > 0;
                }
            }
        }
    }
}

/// A pending job's SchedNodes as names: none where backfill reserved nothing (squeue prints
/// `(null)` or nothing) or the list cannot be read (the plan then guesses, as without it).
fn planned_nodes(field: &str) -> Vec<String> {
    match field.trim() {
        "" | "(null)" | "N/A" | "None" => Vec::new(),
        list => expand_hostlist(list).unwrap_or_default(),
    }
}

/// Slurm's reason for each pending job of `records`, by the id [`read_records`] gives the
/// job: `accountd status` says why jobs wait. Lines that cannot be read are left out here
/// too.
pub fn pending_reasons(records: &Records) -> BTreeMap<u64, String> {
    let mut reasons = BTreeMap::new();
    for r in records.jobs() {
        if r.state == JobState::Pending {
            reasons
                .entry(r.id)
                .or_insert_with(|| r.reason.trim().to_string());
        }
    }
    reasons
}

/// The one GPU type all of a job's GPUs are of (the allocation's typed entries, where
/// AccountingStorageTRES lists the type, or the request's); `None` for untyped GPUs, or
/// GPUs of several types (the plan then counts a running job by its node's type).
fn one_type(count: &GpuCount) -> Option<String> {
    let mut types = count.by_type.iter().filter(|(_, n)| **n > 0);
    match (types.next(), types.next()) {
        (Some((k, n)), None) if *n == count.total => Some(k.clone()),
        _ => None,
    }
}

/// A team's GrpTRES: its GPUs in all and, in a typed configuration, of each type
/// (`gres/gpu=5,gres/gpu:a100=2,gres/gpu:h100=3`). Slurm counts a typed request against both
/// its type and `gres/gpu`. The shards' type ([`SHARE_TYPE`]) is `gres/shard`.
pub fn grp_tres(total: u32, by_type: Option<&BTreeMap<String, u32>>) -> String {
    let mut tres = format!("gres/gpu={total}");
    for (k, n) in by_type.into_iter().flatten() {
        if k == SHARE_TYPE {
            // Shards are `gres/shard` to Slurm, untyped (issue 30).
            tres.push_str(&format!(",gres/shard={n}"));
        } else {
            tres.push_str(&format!(",gres/gpu:{k}={n}"));
        }
    }
    tres
}

/// Slurm's compressed host list (`n1`, `n[1-3,7]`, `gpu-[01-02],cpu1`) as node names; `None`
/// when it is not one (the job's placement is then unknown, which only costs the fallback
/// reclaim its choice of node).
pub fn expand_hostlist(list: &str) -> Option<Vec<String>> {
    const MAX_NODES: usize = 100_000;
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0usize;
    let mut parts = Vec::new();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        let Some(open) = part.find('[') else {
            if part.contains(']') || part.contains(' ') {
                return None;
            }
            out.push(part.to_string());
            continue;
        };
        let close = part.rfind(']')?;
        let (prefix, ranges, suffix) = (&part[..open], &part[open + 1..close], &part[close + 1..]);
        if ranges.contains('[') || !suffix.is_empty() {
            return None;
        }
        for range in ranges.split(',') {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            let (lo, hi): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
            if hi < lo || hi - lo > MAX_NODES as u64 {
                return None;
            }
            for n in lo..=hi {
                out.push(format!("{prefix}{n:0width$}", width = a.len()));
                if out.len() > MAX_NODES {
                    return None;
                }
            }
        }
    }
    Some(out)
}

/// Whether a pending job waits only for resources or limits (so GPUs given to its team would
/// start it), not for a time, a dependency or a hold.
fn eligible_reason(reason: &str) -> bool {
    let r = reason.trim();
    !(r == "BeginTime"
        || r.starts_with("Dependency")
        || r.starts_with("JobHeld")
        || r == "DependencyNeverSatisfied"
        || r == "Reservation")
}

/// A time of squeue's output, read as UTC; `None` where there is none (empty, `N/A`, `Unknown`,
/// `None`) or where it does not read.
pub fn parse_utc(text: &str) -> Option<UnixSeconds> {
    let t = text.trim();
    if t.is_empty() || t == "N/A" || t == "Unknown" || t == "None" {
        return None;
    }
    period::parse_local_datetime(t, &chrono::Utc).ok()
}

/// A hold the governor placed on a pending job, as its AdminComment says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GovernorHold {
    pub id: u64,
    pub account: String,
    /// Untyped GPUs where GPUs were governed per type (else: an account outside every team).
    pub untyped: bool,
    /// Held because its run had ended by itself as it was requeued (neither of the above).
    pub run_ended: bool,
    /// Its begin time (squeue's EligibleTime), if any.
    pub begin: Option<UnixSeconds>,
}

/// A released hold lifts a begin time at most this far ahead: Slurm's requeue delay (121 s by
/// default) left by the requeue that came with the hold, less the 2 s a new launch credential
/// needs ([`crate::requeue_delay::LIFT_AFTER`]). A user's own begin time further ahead stays.
pub const UNHOLD_LIFTS_WITHIN_SECS: i64 = 119;

/// Why the governor holds a GPU job of an account outside every team (its AdminComment).
pub const OUTSIDE_HOLD: &str =
    "GPU jobs in governed partitions must run in a team account (-A <team>)";
/// Why it holds a job naming no GPU type in a typed configuration.
pub const UNTYPED_HOLD: &str =
    "GPUs are governed per type; resubmit naming one type (--gres=gpu:<type>:N)";
/// Why it holds a job whose run had ended by itself as it was requeued
/// ([`crate::requeue_check`]).
pub const RUN_ENDED_HOLD: &str =
    "its run ended by itself as it was requeued; held so that it does not run twice (scontrol release runs it again)";
/// The start of the AdminComment of a job the governor held.
const HOLD_MARK: &str = "teamshare: held: ";

/// The AdminComment of a job held because its run had ended by itself.
pub(crate) fn run_ended_hold_comment() -> String {
    format!("{HOLD_MARK}{RUN_ENDED_HOLD}")
}

/// The pending jobs whose AdminComment says the governor held them, and why.
pub fn governor_holds(records: &Records) -> Vec<GovernorHold> {
    let mut out = Vec::new();
    for r in records.jobs() {
        // Most jobs carry no such mark: looked for before anything else.
        if !r.admin_comment.contains(HOLD_MARK) {
            continue;
        }
        let comment = r.admin_comment.trim().trim_end_matches('|');
        let (untyped, run_ended) = match comment.strip_prefix(HOLD_MARK) {
            Some(OUTSIDE_HOLD) => (false, false),
            Some(UNTYPED_HOLD) => (true, false),
            Some(RUN_ENDED_HOLD) => (false, true),
            _ => continue,
        };
        if r.state != JobState::Pending || r.priority != Some(0) {
            continue;
        }
        out.push(GovernorHold {
            id: r.id,
            account: r.account.trim().to_string(),
            untyped,
            run_ended,
            begin: r.eligible_time,
        });
    }
    out
}

#[cfg(test)]
#[path = "squeue_tests.rs"]
mod tests;
