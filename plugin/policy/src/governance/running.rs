//! Phase 1 (DESIGN §4 rule 2): each team's running jobs fill its quota, the protected; the
//! rest is borrowed (the victims), and non-preemptible jobs beyond the quota are violations.

use teamshare_config::Team;

use super::limits::beyond_ceiling;
use super::queues::{Entry, List, Queues, Sink};
use super::rules::Rules;
use crate::priority::{self, encode};

/// Running jobs sorted into the protected (inside the quota), victims and violations.
pub(super) struct Running<'a> {
    /// GPUs held by each team's running jobs.
    pub usage: Vec<u32>,
    /// Victims with how far their team is over its quota for its weight.
    pub victims: Vec<(Entry<'a>, f64)>,
    /// Each team's running jobs, and the places among them of those inside its quota, in
    /// phase-1 order.
    pub lists: Vec<List<'a>>,
    pub protected_by_team: Vec<Vec<usize>>,
    /// Each team's lowest preemptible class value among them.
    pub lowest_displaceable: Vec<Option<u32>>,
    pub violations: Vec<u64>,
    pub over_ceiling: Vec<u64>,
}

/// Phase 1: each team's running jobs fill its quota, non-preemptible classes first (they may
/// only run inside it), then higher classes, then the oldest; the rest is borrowed.
pub(super) fn sort_running<'a>(
    rules: &Rules<'_>,
    queues: &'a Queues<'a>,
    priorities: &mut dyn Sink,
    mut kept: Option<&mut [Option<TeamRunning>]>,
) -> Running<'a> {
    let teams = rules.config.teams.len();
    let lists: Vec<List<'a>> = (0..teams).map(|t| queues.running(t)).collect();
    let mut out = Running {
        usage: vec![0; teams],
        victims: Vec::with_capacity(lists.iter().map(|l| l.len()).sum()),
        protected_by_team: Vec::with_capacity(teams),
        lists,
        lowest_displaceable: vec![None; teams],
        violations: Vec::new(),
        over_ceiling: Vec::new(),
    };
    for (t, team) in rules.config.teams.iter().enumerate() {
        let running = out.lists[t];
        let mut fresh = None;
        // A planner keeps the split while the team's running jobs stay as they are: the same
        // protected and victims, the protected jobs' levels (their class's) already given.
        let sorted: &TeamRunning = match kept.as_deref_mut() {
            Some(k) => k[t].get_or_insert_with(|| split_running(rules, team, running, priorities)),
            None => fresh.insert(split_running(rules, team, running, priorities)),
        };
        out.usage[t] = sorted.used;
        out.lowest_displaceable[t] = sorted.lowest_displaceable;
        out.protected_by_team.push(sorted.protected.clone());
        out.victims.extend(
            sorted
                .victims
                .iter()
                .map(|i| (running.get(*i), sorted.over)),
        );
        out.violations.extend(sorted.violations.iter().copied());
        out.over_ceiling.extend(sorted.over_ceiling.iter().copied());
    }
    out
}

/// Phase 1 for one team: what a [`Planner`](super::Planner) keeps while the team's running jobs do
/// not change (places in the team's running list).
#[derive(Clone, Default)]
pub(super) struct TeamRunning {
    used: u32,
    /// How far the team is over its quota for its weight.
    over: f64,
    protected: Vec<usize>,
    pub victims: Vec<usize>,
    violations: Vec<u64>,
    /// Borrowed jobs beyond the team's ceiling ([`Plan::over_ceiling`](super::Plan::over_ceiling)).
    over_ceiling: Vec<u64>,
    /// The lowest preemptible class value among the protected jobs.
    lowest_displaceable: Option<u32>,
}

/// One team's running jobs, in phase-1 order, split into the protected, the victims and the
/// violations; the protected get their level.
pub(super) fn split_running(
    rules: &Rules<'_>,
    team: &Team,
    running: List<'_>,
    priorities: &mut dyn Sink,
) -> TeamRunning {
    let used = running.iter().fold(0u32, |s, j| s.saturating_add(j.gpus));
    let mut out = TeamRunning {
        used,
        over: (f64::from(used) - f64::from(team.quota.total)) / f64::from(team.weight.max(1)),
        ..TeamRunning::default()
    };
    let mut inside = 0u32;
    for (i, j) in running.iter().enumerate() {
        let fits = inside.saturating_add(j.gpus) <= team.quota.total;
        if fits || !rules.preemptible(&j) {
            if fits {
                inside += j.gpus;
            } else {
                // Rule 6: a non-preemptible job never borrows. It keeps the protected
                // level (Slurm must not pick it) until the governor requeues it.
                out.violations.push(j.id);
            }
            priorities.set(
                j,
                encode(
                    priority::protected_level(rules.value(&j)),
                    rules.class_idx(&j),
                ),
            );
            if fits {
                out.protected.push(i);
                if rules.preemptible(&j) {
                    let v = rules.value(&j);
                    out.lowest_displaceable =
                        Some(out.lowest_displaceable.map_or(v, |l: u32| l.min(v)));
                }
            }
        } else {
            out.victims.push(i);
        }
    }
    out.over_ceiling = beyond_ceiling(rules, team, &running, &out.victims, used);
    out
}
