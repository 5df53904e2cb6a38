//! The governor's plan, through the policy's [`Planner`] as the replay's: kept between passes
//! with a configuration of its own, given at every pass the jobs as read, which it holds anew
//! only where their records changed (docs/design/governance-at-scale.md, decision 14).

use std::collections::{BTreeMap, BTreeSet};

use self_cell::self_cell;
use teamshare_config::Config;
use teamshare_policy::governance::{ClusterJob, PassInput, Plan, Planner, ShardPlaces};

use crate::capacity::Capacity;
use crate::period::UnixSeconds;

type HeldPlanner<'c> = Planner<'c>;

self_cell!(
    /// A [`Planner`] with the configuration it plans by.
    struct Cell {
        owner: Config,
        #[covariant]
        dependent: HeldPlanner,
    }
);

/// The governor's [`Planner`] and its configuration, kept from pass to pass.
pub(crate) struct Planning {
    cell: Cell,
}

/// What a pass plans from besides the configuration: the jobs as read and where shard jobs
/// sit, the usable nodes' GPUs, the fair-share factors, the jobs idle for the idle window,
/// and the instant (seconds, and the read's milliseconds).
pub(crate) struct PassRead<'a> {
    pub jobs: &'a [ClusterJob],
    pub shard_gpus: &'a ShardPlaces,
    pub cap: &'a Capacity,
    pub fairshare: &'a BTreeMap<String, f64>,
    pub idle: &'a BTreeSet<u64>,
    pub now: UnixSeconds,
    pub now_ms: i64,
}

impl Planning {
    pub(crate) fn new(config: Config) -> Planning {
        Planning {
            cell: Cell::new(config, |config| Planner::new(config)),
        }
    }

    /// The plan for the jobs as `read` them: every priority the governed jobs should have (the
    /// actions compare them with what Slurm holds), and the state the plugin reads.
    pub(crate) fn plan(&mut self, read: &PassRead<'_>) -> Plan {
        self.cell.with_dependent_mut(|_, planner| {
            planner.set_nodes(&read.cap.per_node);
            planner.set_types(&read.cap.by_type, &read.cap.per_node_types);
            planner.set_shard_places(read.shard_gpus.clone());
            planner.set_idle(read.idle.clone());
            planner.hold_read(read.jobs);
            planner.plan(&PassInput {
                capacity: read.cap.total,
                fairshare: read.fairshare,
                now: read.now,
                now_ms: read.now_ms,
                publish: true,
                all_priorities: true,
            })
        })
    }

    /// How many jobs the planner holds.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.cell.borrow_dependent().len()
    }
}

/// What the policy plans for `read` by `config`, from scratch (a [`Planning`] of its own): the
/// dry run and the unit tests.
pub(crate) fn plan_once(config: &Config, read: &PassRead<'_>) -> Plan {
    Planning::new(config.clone()).plan(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{gpus, job};
    use teamshare_policy::governance::{plan, GovernInput, Phase, NO_SHARD_PLACES};

    const CONFIG: &str = r#"
[cluster]
name = "t"
[[team]]
name = "a"
quota = 2
[[team]]
name = "b"
quota = 2
borrow_limit = 4
"#;

    fn read<'a>(
        jobs: &'a [ClusterJob],
        cap: &'a Capacity,
        none: &'a (BTreeMap<String, f64>, BTreeSet<u64>),
        now: i64,
    ) -> PassRead<'a> {
        PassRead {
            jobs,
            shard_gpus: &NO_SHARD_PLACES,
            cap,
            fairshare: &none.0,
            idle: &none.1,
            now,
            now_ms: now * 1_000,
        }
    }

    fn reference(config: &Config, jobs: &[ClusterJob], cap: &Capacity, now: i64) -> Plan {
        plan(&GovernInput {
            config,
            capacity: cap.total,
            jobs,
            fairshare: &BTreeMap::new(),
            now,
            now_ms: now * 1_000,
            node_gpus: &cap.per_node,
            capacity_by_type: &cap.by_type,
            node_types: &cap.per_node_types,
            idle: &BTreeSet::new(),
            shard_gpus: &NO_SHARD_PLACES,
        })
    }

    /// Pass after pass over reads that change, a kept [`Planning`] plans what [`plan`] does
    /// from scratch: every priority (the actions compare them all with Slurm's), the limits,
    /// the actions and the state; jobs no longer read are let go.
    #[test]
    fn a_kept_planning_plans_what_plan_does_as_the_reads_change() {
        let config = teamshare_config::parse(CONFIG, "t.toml").expect("valid");
        let cap = gpus(6);
        let none = (BTreeMap::new(), BTreeSet::new());
        let mut planning = Planning::new(config.clone());
        let mut jobs: Vec<ClusterJob> = (1..=4)
            .map(|i| job(i, "b", Phase::Running, 100 + i as i64))
            .collect();
        jobs.push(job(10, "a", Phase::Pending, 500));
        jobs.push(job(11, "a", Phase::Pending, 501));
        jobs.push(job(12, "b", Phase::Pending, 502));
        for now in [1_000, 1_001, 1_002, 1_003] {
            let got = planning.plan(&read(&jobs, &cap, &none, now));
            let want = reference(&config, &jobs, &cap, now);
            assert_eq!(
                Plan {
                    changed: Vec::new(),
                    ..got.clone()
                },
                want,
                "pass at {now}"
            );
            assert_eq!(planning.held(), jobs.len());
            // Slurm applies the priorities, but for the pass whose actions were put off
            // (a busy actuator): the next read shows the records unchanged, and the plan
            // must go by what Slurm holds, not by what the planner gave.
            if now != 1_001 {
                for j in &mut jobs {
                    if let Some(p) = got.priorities.get(&j.id) {
                        j.priority = *p;
                    }
                }
            }
            match now {
                1_000 => {
                    jobs.retain(|j| j.id != 1);
                    let j = jobs.iter_mut().find(|j| j.id == 10).expect("listed");
                    j.phase = Phase::Running;
                    j.start = Some(now);
                    jobs.push(job(30, "a", Phase::Pending, now));
                }
                1_001 => {}
                _ => jobs.push(job(20 + now as u64, "b", Phase::Pending, now)),
            }
        }
    }
}
