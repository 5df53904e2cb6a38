//! Phase 2 (DESIGN §4 rule 3): the running borrowed jobs in reclaim order, each with its
//! level.

use super::queues::{Entry, Sink};
use super::rules::Rules;
use super::victim_slots::stable_slots;
use super::{ClusterJob, Victim};
use crate::priority::{self, encode};

/// A running borrowed job in reclaim order, with its level.
#[derive(Clone, Copy)]
pub(super) struct Ranked<'a> {
    pub job: Entry<'a>,
    pub level: u32,
    /// Slurm's PreemptExemptTime protects it until then.
    pub exempt_until: i64,
}

impl Ranked<'_> {
    /// The victim as the published state shows it.
    pub(super) fn victim(&self) -> Victim {
        Victim {
            job_id: self.job.id,
            team: self.job.team.clone(),
            gpus: self.job.gpus,
            level: self.level,
            exempt_until: self.exempt_until,
            gpu_type: self.job.gpu_type.clone(),
        }
    }
}

/// Phase 2: reclaim order (most over quota for its weight, lowest class, most recently
/// started) and each victim's level.
pub(super) fn order_victims<'a>(
    rules: &Rules<'_>,
    mut victims: Vec<(Entry<'a>, f64)>,
    now: i64,
    priorities: &mut dyn Sink,
) -> Vec<Ranked<'a>> {
    victims.sort_by(|a, b| victim_order(rules, (&a.0, a.1), (&b.0, b.1)));
    rank_victims(rules, victims.into_iter().map(|(j, _)| j), now, priorities)
}

/// Rule 3's victim order between two running jobs, each with how far its team is over its
/// quota for its weight: the team most over first, then the lowest class, then the most
/// recently started (then the highest id). With `idle_first_reclaim` (issue 29), the jobs
/// idle for the whole idle window go before all of those.
pub(super) fn victim_order(
    rules: &Rules<'_>,
    (a, oa): (&ClusterJob, f64),
    (b, ob): (&ClusterJob, f64),
) -> std::cmp::Ordering {
    rules
        .idle_first(b)
        .cmp(&rules.idle_first(a))
        .then(ob.partial_cmp(&oa).unwrap_or(std::cmp::Ordering::Equal))
        .then(rules.value(a).cmp(&rules.value(b)))
        .then(b.start.cmp(&a.start))
        .then(b.id.cmp(&a.id))
}

/// Victims in reclaim order given their levels, the first the lowest. A victim keeps the
/// level it holds where the order around it holds ([`stable_slots`]): a change in the order
/// costs Slurm an update for the victims that moved, not for every one behind them.
pub(super) fn rank_victims<'a>(
    rules: &Rules<'_>,
    victims: impl Iterator<Item = Entry<'a>>,
    now: i64,
    priorities: &mut dyn Sink,
) -> Vec<Ranked<'a>> {
    let victims: Vec<Entry<'a>> = victims.collect();
    let held: Vec<Option<u32>> = victims
        .iter()
        .map(|j| priority::victim_slot(priority::level(priorities.held(*j))))
        .collect();
    victims
        .into_iter()
        .zip(stable_slots(&held))
        .map(|(j, slot)| {
            let level = priority::victim_level(slot as usize);
            priorities.set(j, encode(level, rules.class_idx(&j)));
            Ranked {
                job: j,
                level,
                exempt_until: j.start.unwrap_or(now).saturating_add(rules.exempt_secs),
            }
        })
        .collect()
}
