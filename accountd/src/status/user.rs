//! `accountd status --user U`: one user's GPU jobs in the governed partitions, with what
//! teamshare wrote in their AdminComment (the idle policy's notices, the governor's holds):
//! what a user reads to learn that their idle GPUs were seen (issue 29).

use std::fmt::Write as _;

use serde::Serialize;
use teamshare_policy::governance::{ClusterJob, Phase};

use crate::parsable::{self, Shape};

/// The squeue fields [`parse_user_jobs`] reads: `squeue -h -u U -O <these>`.
pub const USER_SQUEUE_FIELDS: &str = "JobID:|,admin_comment:|";

/// How teamshare's notes start in an AdminComment.
const MARK: &str = "teamshare: ";

/// One of the user's jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserJob {
    pub job: u64,
    pub team: String,
    /// `running` or `pending`.
    pub state: &'static str,
    pub gpus: u32,
    pub nodes: Vec<String>,
    /// teamshare's note in its AdminComment, without the `teamshare: ` mark (an
    /// administrator's own comment is not shown).
    pub note: Option<String>,
}

/// Each job id of squeue's `JobID:|,admin_comment:|` lines (JobID: unique per array task), with teamshare's note if its
/// AdminComment has one. Lines that do not read are left out.
pub fn parse_user_jobs(text: &str) -> Vec<(u64, Option<String>)> {
    parsable::lines(text)
        .filter_map(|(_, line)| {
            let [id, comment] = parsable::fields(line, Shape::Rest).ok()?;
            let comment = comment.trim().trim_end_matches('|').trim();
            let note = comment.strip_prefix(MARK).map(str::to_string);
            Some((id.trim().parse().ok()?, note))
        })
        .collect()
}

/// The user's jobs among those the governor governs (`jobs`, as a pass reads them), in id
/// order, each with its note.
pub fn user_jobs(jobs: &[ClusterJob], theirs: &[(u64, Option<String>)]) -> Vec<UserJob> {
    let mut out: Vec<UserJob> = theirs
        .iter()
        .filter_map(|(id, note)| {
            let j = jobs.iter().find(|j| j.id == *id)?;
            Some(UserJob {
                job: j.id,
                team: j.team.clone(),
                state: if j.phase == Phase::Running {
                    "running"
                } else {
                    "pending"
                },
                gpus: j.gpus,
                nodes: if j.phase == Phase::Running {
                    j.nodes.clone()
                } else {
                    Vec::new()
                },
                note: note.clone(),
            })
        })
        .collect();
    out.sort_by_key(|j| j.job);
    out.dedup_by_key(|j| j.job);
    out
}

/// The table a user reads.
pub fn render_user(user: &str, jobs: &[UserJob]) -> String {
    let mut out = format!(
        "GPU jobs of {user} in the governed partitions: {}\n",
        jobs.len()
    );
    if jobs.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\n{:<10} {:<14} {:<8} {:>4}  {:<12} TEAMSHARE",
        "JOB", "TEAM", "STATE", "GPUS", "NODES"
    );
    for j in jobs {
        let nodes = if j.nodes.is_empty() {
            "-".to_string()
        } else {
            j.nodes.join(",")
        };
        let _ = writeln!(
            out,
            "{:<10} {:<14} {:<8} {:>4}  {:<12} {}",
            j.job,
            j.team,
            j.state,
            j.gpus,
            nodes,
            j.note.as_deref().unwrap_or("-")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, phase: Phase) -> ClusterJob {
        ClusterJob {
            id,
            team: "vision".into(),
            phase,
            gpus: 2,
            gpu_type: None,
            priority: 1,
            submit: 0,
            start: Some(0),
            eligible: true,
            parked: false,
            park_held: false,
            batch: true,
            nodes: vec!["n1".into()],
            node_count: 1,
            completing: false,
            tasks: 1,
        }
    }

    #[test]
    fn a_user_reads_teamshares_notes_on_their_jobs() {
        let text = "41|(null)|\n42|teamshare: idle: its GPUs were below 5% in every sample of the last 1h|\n43||\n44|an admin wrote | this|\n99|teamshare: idle: x|\nnonsense\n";
        let theirs = parse_user_jobs(text);
        assert_eq!(theirs.len(), 5);
        assert_eq!(theirs[0], (41, None), "squeue's empty AdminComment");
        assert_eq!(
            theirs[3],
            (44, None),
            "an administrator's comment is not teamshare's"
        );
        // Job 99 is not governed (another partition): left out.
        let jobs = vec![
            job(43, Phase::Pending),
            job(42, Phase::Running),
            job(44, Phase::Running),
        ];
        let shown = user_jobs(&jobs, &theirs);
        assert_eq!(
            shown.iter().map(|j| j.job).collect::<Vec<_>>(),
            [42, 43, 44]
        );
        assert_eq!(
            shown[0].note.as_deref(),
            Some("idle: its GPUs were below 5% in every sample of the last 1h")
        );
        assert!(shown[1].nodes.is_empty() && shown[1].state == "pending");
        let table = render_user("alice", &shown);
        assert!(
            table.starts_with("GPU jobs of alice in the governed partitions: 3\n"),
            "{table}"
        );
        assert!(
            table.contains("42         vision         running     2  n1           idle: its GPUs"),
            "{table}"
        );
        assert_eq!(
            render_user("bob", &[]),
            "GPU jobs of bob in the governed partitions: 0\n"
        );
    }
}
