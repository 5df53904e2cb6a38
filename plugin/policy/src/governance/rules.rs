//! What the phases share: the configuration read once ([`Rules`]), and the keys the phases
//! order a team's running and pending jobs by.

use std::borrow::Cow;
use std::collections::BTreeSet;

use teamshare_config::{Config, WithinTeam};

use super::{classes, Class, ClusterJob, Phase};
use crate::priority;

/// What the phases of [`plan`](super::plan) share: the configuration read once.
pub(super) struct Rules<'a> {
    pub config: &'a Config,
    table: Vec<Class>,
    /// Per class index: how many distinct class values are below its value.
    ranks: Vec<u32>,
    pub within: bool,
    pub exempt_secs: i64,
    /// The teams' places in the configuration, in the order of their names.
    pub by_name: Vec<usize>,
    /// The running jobs idle for the whole idle window ([`GovernInput::idle`](super::GovernInput::idle)), when the
    /// configuration puts them first in rule 3's order (`idle_first_reclaim`, or an idle
    /// policy whose action is `"reclaim-first"`); else none. A [`Planner`](super::Planner)
    /// owns the set it was last given.
    idle: Cow<'a, BTreeSet<u64>>,
}

impl<'a> Rules<'a> {
    pub(super) fn new(config: &'a Config) -> Rules<'a> {
        let table = classes(config);
        let ranks = (0..table.len())
            .map(|i| super::class_rank(config, u8::try_from(i).unwrap_or(u8::MAX)))
            .collect();
        let mut by_name: Vec<usize> = (0..config.teams.len()).collect();
        by_name.sort_by(|a, b| config.teams[*a].name.cmp(&config.teams[*b].name));
        Rules {
            config,
            table,
            ranks,
            within: config.governance.preempt_within_team == WithinTeam::LowerPriority,
            exempt_secs: i64::try_from(config.governance.min_runtime_before_reclaim.as_secs())
                .unwrap_or(i64::MAX),
            by_name,
            idle: Cow::Owned(BTreeSet::new()),
        }
    }

    /// The same, with the jobs known to be idle where the configuration puts them first in
    /// rule 3's order.
    pub(super) fn with_idle(mut self, idle: &'a BTreeSet<u64>) -> Rules<'a> {
        if self
            .config
            .governance
            .idle_orders_victims(self.config.idle_policy.as_ref())
        {
            self.idle = Cow::Borrowed(idle);
        }
        self
    }

    /// The jobs known to be idle from now on, kept where the configuration puts them first
    /// (as [`Rules::with_idle`]); whether that changed the set the order reads.
    pub(super) fn set_idle(&mut self, idle: BTreeSet<u64>) -> bool {
        let orders = self
            .config
            .governance
            .idle_orders_victims(self.config.idle_policy.as_ref());
        if !orders || *self.idle == idle {
            return false;
        }
        self.idle = Cow::Owned(idle);
        true
    }

    /// The idle jobs rule 3's order reads (empty where the configuration does not).
    pub(super) fn idle_set(&self) -> &BTreeSet<u64> {
        &self.idle
    }

    /// Whether a running job goes first among rule 3's victims: idle for the whole window
    /// and the configuration says so.
    pub(super) fn idle_first(&self, j: &ClusterJob) -> bool {
        self.idle.contains(&j.id)
    }

    pub(super) fn class_idx(&self, j: &ClusterJob) -> u8 {
        let i = priority::class_index(j.priority);
        if usize::from(i) < self.table.len() {
            i
        } else {
            0
        }
    }

    fn class(&self, j: &ClusterJob) -> &Class {
        &self.table[usize::from(self.class_idx(j))]
    }

    pub(super) fn value(&self, j: &ClusterJob) -> u32 {
        self.class(j).value
    }

    pub(super) fn preemptible(&self, j: &ClusterJob) -> bool {
        self.class(j).preemptible
    }

    /// How many distinct class values are below this job's: its class's place in a band.
    pub(super) fn class_rank(&self, j: &ClusterJob) -> u32 {
        self.ranks[usize::from(self.class_idx(j))]
    }

    /// A running job's place in its team's walk over the quota (phase 1): non-preemptible
    /// classes first (they may only run inside it), then higher classes, the oldest, the lowest
    /// id.
    pub(super) fn running_key(&self, j: &ClusterJob) -> RunningKey {
        (
            self.preemptible(j),
            std::cmp::Reverse(self.value(j)),
            j.start,
            j.id,
        )
    }

    /// A pending job's place in its team's queue (phase 3): higher classes first, then the
    /// oldest, the lowest id.
    pub(super) fn pending_key(&self, j: &ClusterJob) -> PendingKey {
        (std::cmp::Reverse(self.value(j)), j.submit, j.id)
    }

    /// Whether the plan ranks a pending job: not held by its owner or an administrator (a
    /// job teamshare parked with a hold is ranked: the governor releases it when it fits).
    pub(super) fn ranked(j: &ClusterJob) -> bool {
        j.phase == Phase::Pending && (j.priority != 0 || j.park_held)
    }
}

pub(super) type RunningKey = (bool, std::cmp::Reverse<u32>, Option<i64>, u64);
pub(super) type PendingKey = (std::cmp::Reverse<u32>, i64, u64);

/// A pending job as a displacement attempt sees it: class value, GPUs, nodes.
pub(super) type Alike = (u32, u32, u32);

impl Rules<'_> {
    pub(super) fn alike(&self, j: &ClusterJob) -> Alike {
        (self.value(j), j.gpus, j.node_count)
    }
}
