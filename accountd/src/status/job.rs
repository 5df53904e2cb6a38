//! `accountd status --job J [--update FIELD=VALUE ...]`: one job, why it waits or is held,
//! and how teamshare judges an update of it (issue 25, finding 13).
//!
//! Slurm 22.05's `job_modify` cannot hand the user a message, so a refused `scontrol update`
//! shows only the error code's text ("Invalid generic resource (gres) specification",
//! "Access/permission denied", ...). teamshare's reason is a pure function of the
//! update's words, the configuration and the governor's state
//! ([`teamshare_policy::modify::check_modify`]): given the same words, [`judge_update`] runs
//! the plugin's own check and says what the plugin said (and says on 23.02 on, where the
//! message reaches the user). The words are read as `scontrol update` reads them
//! ([`parse_update`]): the same field names, abbreviations and values, so that the user pastes
//! what they typed.

use serde::Serialize;
use teamshare_config::Config;
use teamshare_policy::governance::{Phase, PublishedState, UNREADABLE_GPUS};
use teamshare_policy::inputs::judge_state;
use teamshare_policy::modify::{check_modify, ModifyRequest};
use teamshare_policy::submit::Verdict;

use super::{pool_figures, why_waiting, JobsByPool, StatusInput, ALL};
use crate::squeue::{GovernorHold, OUTSIDE_HOLD, RUN_ENDED_HOLD, UNTYPED_HOLD};

/// One job as `accountd status --job` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobStatus {
    pub job: u64,
    pub account: String,
    /// The account is one of the configuration's teams.
    pub team: bool,
    /// `running` or `pending`.
    pub state: &'static str,
    /// GPUs held (running) or asked for by each task (pending); `None` when unreadable.
    pub gpus: Option<u32>,
    pub gpu_type: Option<String>,
    /// Pending tasks this record stands for (a job array's pending record: more than one).
    pub tasks: u32,
    /// A running job's nodes; a pending job's, those Slurm's backfill reserved for it.
    pub nodes: Vec<String>,
    /// Why a pending job waits, as `accountd status` groups them.
    pub waits: Option<String>,
    /// A hold the governor placed, and why (its owner cannot lift it unless it says so).
    pub held_by_teamshare: Option<String>,
}

/// The job `id` among the jobs `input` holds, or `None` when this reader does not see it (not
/// in a governed partition, ended, or another user's under `PrivateData=jobs`).
pub fn job_status(input: &StatusInput<'_>, holds: &[GovernorHold], id: u64) -> Option<JobStatus> {
    let j = input.jobs.iter().find(|j| j.id == id)?;
    let config = input.config;
    let typed = config.is_typed();
    let team = config.team(&j.team);
    let held_by_teamshare = holds
        .iter()
        .find(|h| h.id == id)
        .map(|h| {
            let why = if h.run_ended {
                RUN_ENDED_HOLD
            } else if h.untyped {
                UNTYPED_HOLD
            } else {
                OUTSIDE_HOLD
            };
            why.to_string()
        })
        .or_else(|| {
            j.park_held.then(|| {
                "its priority class may not borrow; the governor releases it when it fits its team's quota".to_string()
            })
        });
    let waits = (j.phase == Phase::Pending).then(|| {
        let slurm = input.reasons.get(&id).map_or("None", String::as_str);
        let Some(team) = team else {
            return format!("Slurm: {slurm} (account outside every team)");
        };
        let jobs = JobsByPool::new(input, typed);
        let state = input.state.as_ref().ok().copied();
        let pools = pool_figures(input, team, &jobs, state, typed);
        let pool = if typed {
            j.gpu_type.as_deref()
        } else {
            Some(ALL)
        };
        why_waiting(j, slurm, pool.and_then(|p| pools.get(p)), typed)
    });
    Some(JobStatus {
        job: id,
        account: j.team.clone(),
        team: team.is_some(),
        state: match j.phase {
            Phase::Running => "running",
            Phase::Pending => "pending",
        },
        gpus: (j.gpus != UNREADABLE_GPUS).then_some(j.gpus),
        gpu_type: j.gpu_type.clone(),
        tasks: j.tasks.max(1),
        nodes: j.nodes.clone(),
        waits,
        held_by_teamshare,
    })
}

/// An update as `scontrol update` would send it: the fields teamshare reads, and the names of
/// the others (Slurm's alone to judge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedUpdate {
    /// `JobId=` where the words name one.
    pub job: Option<String>,
    pub request: ModifyRequest,
    pub other_fields: Vec<String>,
}

/// The fields teamshare's check reads, as scontrol matches them: a tag matches a name when it
/// is the name, or a prefix of it at least `min` characters long, case-insensitively
/// (scontrol's `xstrncasecmp(tag, name, MAX(taglen, min))`). In scontrol's order: no field
/// scontrol tests before these takes their abbreviations.
const FIELDS: &[(&str, usize, Field)] = &[
    ("JobId", 3, Field::JobId),
    ("Priority", 2, Field::Priority),
    ("NumTasks", 8, Field::NumTasks),
    ("ReqProcs", 8, Field::NumTasks),
    ("ReqNodes", 8, Field::NumNodes),
    ("NumNodes", 8, Field::NumNodes),
    ("ReqSockets", 4, Field::ReqSockets),
    ("TasksPerNode", 2, Field::TasksPerNode),
    ("Partition", 2, Field::Partition),
    ("QOS", 2, Field::Qos),
    ("TresPerJob", 8, Field::TresPerJob),
    ("TresPerNode", 8, Field::TresPerNode),
    ("TresPerSocket", 8, Field::TresPerSocket),
    ("TresPerTask", 8, Field::TresPerTask),
    ("Gres", 2, Field::Gres),
    ("Account", 1, Field::Account),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    JobId,
    Priority,
    NumTasks,
    NumNodes,
    ReqSockets,
    TasksPerNode,
    Partition,
    Qos,
    TresPerJob,
    TresPerNode,
    TresPerSocket,
    TresPerTask,
    Gres,
    Account,
}

fn tag_matches(tag: &str, name: &str, min: usize) -> bool {
    let (t, n) = (tag.as_bytes(), name.as_bytes());
    (0..t.len().max(min)).all(|i| {
        let (a, b) = (t.get(i).copied(), n.get(i).copied());
        match (a, b) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(&b),
            _ => false,
        }
    }) || tag.eq_ignore_ascii_case(name)
}

/// Read `scontrol update` words (`FIELD=VALUE`, one per argument, as the shell splits them) into
/// the request slurmctld hands the plugin. `uid` is who would run it. Values scontrol itself
/// refuses are refused here with its reason.
pub fn parse_update(words: &[String], uid: u32) -> Result<ParsedUpdate, String> {
    let mut out = ParsedUpdate {
        job: None,
        request: ModifyRequest {
            submit_uid: uid,
            ..ModifyRequest::default()
        },
        other_fields: Vec::new(),
    };
    for word in words {
        let Some((tag, value)) = word.split_once('=') else {
            return Err(format!(
                "`{word}`: not FIELD=VALUE (write the words given to `scontrol update`)"
            ));
        };
        match FIELDS
            .iter()
            .find(|(name, min, _)| tag_matches(tag, name, *min))
        {
            Some((_, _, field)) => set_field(&mut out, *field, tag, value)?,
            None => out.other_fields.push(tag.to_string()),
        }
    }
    Ok(out)
}

fn set_field(out: &mut ParsedUpdate, field: Field, tag: &str, value: &str) -> Result<(), String> {
    let number = |max: u32| -> Result<u32, String> {
        value
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(|| format!("{tag}={value}: scontrol refuses it (not a count)"))
    };
    let r = &mut out.request;
    let v = Some(value.to_string());
    match field {
        Field::JobId => out.job = v,
        Field::Priority => r.priority = Some(number(u32::MAX)?),
        Field::NumTasks => r.gpus.num_tasks = Some(number(u32::MAX)?),
        Field::NumNodes => r.gpus.min_nodes = Some(min_nodes(tag, value)?),
        Field::ReqSockets => r.gpus.sockets_per_node = Some(number(u32::from(u16::MAX))?),
        Field::TasksPerNode => r.gpus.ntasks_per_node = Some(number(u32::from(u16::MAX))?),
        Field::Partition => r.partition = v,
        Field::Qos => r.qos = v,
        Field::TresPerJob => r.gpus.tres_per_job = v,
        Field::TresPerSocket => r.gpus.tres_per_socket = v,
        Field::TresPerTask => r.gpus.tres_per_task = v,
        Field::TresPerNode => append(&mut r.gpus.tres_per_node, value),
        Field::Gres => append(&mut r.gpus.tres_per_node, &gres_as_tres(value)),
        Field::Account => r.account = v,
    }
    Ok(())
}

/// scontrol joins repeated TresPerNode/Gres words with a comma.
fn append(field: &mut Option<String>, value: &str) {
    match field {
        Some(s) => {
            s.push(',');
            s.push_str(value);
        }
        None => *field = Some(value.to_string()),
    }
}

/// `Gres=gpu:2,shard:1` as scontrol sends it: each item under `gres:`.
fn gres_as_tres(value: &str) -> String {
    value
        .split(',')
        .map(|item| match item.strip_prefix("gres:") {
            Some(_) => item.to_string(),
            None => format!("gres:{item}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// NumNodes: `0`, `ALL` (Slurm's INFINITE), `N` or a range `N-M` (its minimum is sent).
fn min_nodes(tag: &str, value: &str) -> Result<u32, String> {
    if value.eq_ignore_ascii_case("ALL") {
        return Ok(u32::MAX);
    }
    let low = value.split_once('-').map_or(value, |(low, _)| low);
    low.trim()
        .parse::<u32>()
        .map_err(|_| format!("{tag}={value}: scontrol refuses it (not a node count)"))
}

/// How teamshare judges an update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpdateJudgement {
    /// The words, as given.
    pub update: String,
    pub accepted: bool,
    /// teamshare's reason for a refusal: the text the plugin logs, and hands to the user from
    /// Slurm 23.02 on.
    pub reason: Option<String>,
    /// The governor's state was current, so the cluster's size was part of the check (as in
    /// the plugin); else that part was left out, as the plugin leaves it out.
    pub judged_with_state: bool,
    /// Fields teamshare leaves to Slurm.
    pub other_fields: Vec<String>,
}

/// The plugin's check of `update` at `now`, with the state the plugin would use (the current
/// one only).
pub fn judge_update(
    config: &Config,
    words: &[String],
    update: &ParsedUpdate,
    state: Option<&PublishedState>,
    now: i64,
) -> UpdateJudgement {
    let current = state.filter(|s| judge_state(Some(s), config, now).is_current());
    let (accepted, reason) = match check_modify(config, &update.request, current) {
        Verdict::Accept(_) => (true, None),
        Verdict::Reject(r) => (false, Some(r.message)),
    };
    UpdateJudgement {
        update: words.join(" "),
        accepted,
        reason,
        judged_with_state: current.is_some(),
        other_fields: update.other_fields.clone(),
    }
}

/// The job and the judgement as text.
pub fn render(job: Option<&JobStatus>, id: u64, update: Option<&UpdateJudgement>) -> String {
    let mut out = String::new();
    match job {
        Some(j) => render_job(&mut out, j),
        None => out.push_str(&format!(
            "job {id}: not seen: it is in no governed partition, has ended, or is another user's (Slurm's PrivateData=jobs hides those)\n"
        )),
    }
    if let Some(u) = update {
        render_update(&mut out, id, u);
    }
    out
}

fn render_job(out: &mut String, j: &JobStatus) {
    let gpus = match (j.gpus, &j.gpu_type) {
        (None, _) => "GPU request unreadable".to_string(),
        (Some(n), Some(k)) => format!("{n} GPU(s) of type {k}"),
        (Some(n), None) => format!("{n} GPU(s)"),
    };
    let tasks = if j.tasks > 1 {
        format!(" per task, {} tasks", j.tasks)
    } else {
        String::new()
    };
    let who = if j.team { "team" } else { "account (no team)" };
    out.push_str(&format!(
        "job {}: {} {}, {}, {gpus}{tasks}\n",
        j.job, who, j.account, j.state
    ));
    if !j.nodes.is_empty() {
        // A pending job's nodes are those Slurm's backfill reserved for it.
        let label = if j.state == "pending" {
            "reserved nodes"
        } else {
            "nodes"
        };
        out.push_str(&format!("  {label}: {}\n", j.nodes.join(",")));
    }
    if let Some(w) = &j.waits {
        out.push_str(&format!("  waits: {w}\n"));
    }
    if let Some(h) = &j.held_by_teamshare {
        out.push_str(&format!("  held by teamshare: {h}\n"));
    }
}

fn render_update(out: &mut String, id: u64, u: &UpdateJudgement) {
    out.push_str(&format!(
        "update `scontrol update JobId={id} {}`:\n",
        u.update
    ));
    match &u.reason {
        None => {
            out.push_str("  teamshare accepts it (Slurm may still refuse it for its own reasons)\n")
        }
        Some(r) => out.push_str(&format!("  teamshare refuses it: {r}\n")),
    }
    if !u.judged_with_state {
        out.push_str("  (no current governor state: the cluster's size was not checked, as the plugin does not check it then)\n");
    }
    if !u.other_fields.is_empty() {
        out.push_str(&format!("  left to Slurm: {}\n", u.other_fields.join(", ")));
    }
}

#[cfg(test)]
mod tests;
