//! GPU families in GPU-equivalents (issue 30, docs/design/fractional-gpus.md): each pass
//! splits a team's family quota, borrow limit and lend limit (in units of 1/D of a GPU) into
//! per-type figures, which the per-type pools then govern as any typed configuration's.
//!
//! MIG slices are devices of their own: freeing a `1g.10gb` never makes room for a whole A100,
//! so placement, victims and reclaim stay per type. What the family shares is the figures:
//! - the quota goes to the team's running jobs first, in phase-1 order while they fit; then to
//!   its ranked pending jobs, in its order while they fit and the type has capacity no other
//!   quota holds; what is left and lendable goes to the types other teams use (run or wait
//!   for), the rest to those they do not, then where most capacity is free;
//! - the borrow limit goes to its running jobs beyond the quota, then its pending ones;
//! - the lend limit to the idle part of each type's quota.
//!
//! Each type's ceiling is its quota and borrow, so the ceilings Slurm enforces add up, in
//! units, to at most the family's quota plus borrow limit (rule 1). A job of a type the split
//! gave no room waits one pass for it.

use std::collections::BTreeMap;

use teamshare_config::{names_type, Config, Team};

use super::rules::Rules;
use super::{ClusterJob, Phase};

/// One team's jobs of a family, as (member index, GPUs, tasks), in phase-1 order (running) and
/// queue order (pending).
struct TeamJobs {
    running: Vec<(usize, u32)>,
    pending: Vec<(usize, u32, u32)>,
}

/// One family team's split, per member type.
struct Split {
    quota: Vec<u32>,
    /// GPUs of the quota its running jobs hold.
    held: Vec<u32>,
    borrow: Vec<u32>,
    lend: Vec<u32>,
    /// Units of the quota not yet given to a type.
    left: u64,
    /// Which running and pending jobs the quota took (by place in [`TeamJobs`]).
    running_in: Vec<bool>,
    pending_in: Vec<u32>,
}

/// The configuration the typed pools are planned with, every family figure split into its
/// member types; `None` when no team counts a family.
pub(super) fn split_families(
    config: &Config,
    pool_jobs: &BTreeMap<&str, Vec<ClusterJob>>,
    capacity_by_type: &BTreeMap<String, u32>,
) -> Option<Config> {
    let families = config.governed_families();
    if families.is_empty() {
        return None;
    }
    let rules = Rules::new(config);
    let mut out = config.clone();
    for t in out
        .teams
        .iter_mut()
        .filter(|t| families.iter().any(|w| names_type(t, w)) && t.lend_by_type.is_none())
    {
        // A family team lends all or nothing (the configuration allows no number): per type.
        let table = t
            .quota
            .by_type
            .keys()
            .map(|k| (k.clone(), t.lend_limit_of(k)))
            .collect();
        t.lend_by_type = Some(table);
    }
    for whole in families {
        let members = config.family_members(whole);
        let teams: Vec<usize> = (0..config.teams.len())
            .filter(|&i| names_type(&config.teams[i], whole))
            .collect();
        let jobs: Vec<TeamJobs> = teams
            .iter()
            .map(|&i| team_jobs(&rules, &config.teams[i].name, &members, pool_jobs))
            .collect();
        let splits = split_family(config, &members, &teams, &jobs, capacity_by_type);
        for (&i, split) in teams.iter().zip(&splits) {
            write_split(&mut out.teams[i], whole, &members, split);
        }
    }
    Some(out)
}

/// A team's jobs of the family's member types.
fn team_jobs(
    rules: &Rules<'_>,
    team: &str,
    members: &[(&str, u32)],
    pool_jobs: &BTreeMap<&str, Vec<ClusterJob>>,
) -> TeamJobs {
    let mut running = Vec::new();
    let mut pending = Vec::new();
    for (m, (k, _)) in members.iter().enumerate() {
        for j in pool_jobs
            .get(k)
            .into_iter()
            .flatten()
            .filter(|j| j.team == team)
        {
            match j.phase {
                Phase::Running => running.push((rules.running_key(j), (m, j.gpus))),
                _ if Rules::ranked(j) => {
                    pending.push((rules.pending_key(j), (m, j.gpus, j.tasks.max(1))));
                }
                Phase::Pending => {}
            }
        }
    }
    running.sort_by_key(|r| r.0);
    pending.sort_by_key(|p| p.0);
    TeamJobs {
        running: running.into_iter().map(|r| r.1).collect(),
        pending: pending.into_iter().map(|p| p.1).collect(),
    }
}

/// The family's split for its teams (in file order): running jobs, then pending ones, then
/// what is left of each quota; then the borrow and lend limits.
fn split_family(
    config: &Config,
    members: &[(&str, u32)],
    teams: &[usize],
    jobs: &[TeamJobs],
    capacity_by_type: &BTreeMap<String, u32>,
) -> Vec<Split> {
    // Each type's capacity that no quota holds yet: quotas naming the type on its own first.
    let mut free: Vec<u32> = members
        .iter()
        .map(|(k, _)| {
            let own = config
                .teams
                .iter()
                .filter(|t| !names_type(t, members[0].0))
                .fold(0u32, |s, t| s.saturating_add(t.quota_of(k)));
            capacity_by_type
                .get(*k)
                .copied()
                .unwrap_or(0)
                .saturating_sub(own)
        })
        .collect();
    let n = members.len();
    let mut splits: Vec<Split> = teams
        .iter()
        .zip(jobs)
        .map(|(&i, j)| {
            let m = config
                .family_of(members[0].0)
                .map(|m| config.teams[i].family_quota_units(&m));
            Split {
                quota: vec![0; n],
                held: vec![0; n],
                borrow: vec![0; n],
                lend: vec![0; n],
                left: m.unwrap_or(0),
                running_in: vec![false; j.running.len()],
                pending_in: vec![0; j.pending.len()],
            }
        })
        .collect();
    for (s, j) in splits.iter_mut().zip(jobs) {
        quota_to_running(s, j, members, &mut free);
    }
    for (s, j) in splits.iter_mut().zip(jobs) {
        quota_to_pending(s, j, members, &mut free);
    }
    let used = use_units(jobs, members);
    let family = config.family_of(members[0].0);
    for ((s, mine), &i) in splits
        .iter_mut()
        .zip(use_units_each(jobs, members))
        .zip(teams)
    {
        let others: Vec<u64> = used
            .iter()
            .zip(&mine)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let lendable = family.map_or(0, |m| config.teams[i].family_lend_units(&m));
        quota_left_over(s, members, &others, &mut free, lendable);
    }
    for ((s, j), &i) in splits.iter_mut().zip(jobs).zip(teams) {
        let team = &config.teams[i];
        let m = config.family_of(members[0].0);
        if let Some(b) = m.and_then(|m| team.family_borrow_units(&m)) {
            borrow_to_jobs(s, j, members, b);
        } else {
            s.borrow = vec![u32::MAX; n];
        }
        let lend = m.map_or(0, |m| team.family_lend_units(&m));
        lend_idle(s, members, lend);
    }
    splits
}

/// Units of `gpus` GPUs of member `m`.
fn units(members: &[(&str, u32)], m: usize, gpus: u32) -> u64 {
    u64::from(gpus) * u64::from(members[m].1)
}

/// The team's running jobs take its quota in phase-1 order while they fit.
fn quota_to_running(s: &mut Split, j: &TeamJobs, members: &[(&str, u32)], free: &mut [u32]) {
    for (place, &(m, gpus)) in j.running.iter().enumerate() {
        let u = units(members, m, gpus);
        if u <= s.left {
            s.left -= u;
            s.quota[m] = s.quota[m].saturating_add(gpus);
            s.held[m] = s.held[m].saturating_add(gpus);
            free[m] = free[m].saturating_sub(gpus);
            s.running_in[place] = true;
        }
    }
}

/// Its pending jobs' tasks take what is left, in its order, while they fit the quota and
/// their type's free capacity.
fn quota_to_pending(s: &mut Split, j: &TeamJobs, members: &[(&str, u32)], free: &mut [u32]) {
    for (place, &(m, gpus, tasks)) in j.pending.iter().enumerate() {
        let u = units(members, m, gpus);
        if u == 0 {
            continue;
        }
        let by_quota = s.left / u;
        let by_capacity = u64::from(free[m] / gpus.max(1));
        let n = u64::from(tasks).min(by_quota).min(by_capacity);
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        s.left -= n * u;
        s.quota[m] = s.quota[m].saturating_add(n32.saturating_mul(gpus));
        free[m] = free[m].saturating_sub(n32.saturating_mul(gpus));
        s.pending_in[place] = n32;
    }
}

/// Units of each member type a team's jobs hold or ask for (running, and ranked pending).
fn use_units_each(jobs: &[TeamJobs], members: &[(&str, u32)]) -> Vec<Vec<u64>> {
    jobs.iter()
        .map(|j| {
            let mut w = vec![0u64; members.len()];
            for &(m, gpus) in &j.running {
                w[m] = w[m].saturating_add(units(members, m, gpus));
            }
            for &(m, gpus, tasks) in &j.pending {
                w[m] = w[m].saturating_add(units(members, m, gpus) * u64::from(tasks));
            }
            w
        })
        .collect()
}

/// The same, over all the family's teams.
fn use_units(jobs: &[TeamJobs], members: &[(&str, u32)]) -> Vec<u64> {
    use_units_each(jobs, members)
        .into_iter()
        .fold(vec![0u64; members.len()], |mut a, w| {
            a.iter_mut()
                .zip(w)
                .for_each(|(x, y)| *x = x.saturating_add(y));
            a
        })
}

/// What is left of the quota: the part the team lends goes where other teams run or wait
/// (it is lent there, and stays there from pass to pass while they do), the rest where they
/// do not (so that it blocks no borrower), each then where most capacity is free; a
/// remainder no type's GPU fits stays ungiven.
fn quota_left_over(
    s: &mut Split,
    members: &[(&str, u32)],
    others: &[u64],
    free: &mut [u32],
    lendable: u64,
) {
    let lent_part = s.left.min(lendable);
    let kept_part = s.left - lent_part;
    for (part, towards_waiting) in [(lent_part, true), (kept_part, false)] {
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&m| {
            let waiting = if towards_waiting {
                u64::MAX - others[m]
            } else {
                others[m]
            };
            (waiting, std::cmp::Reverse(units(members, m, free[m])), m)
        });
        let mut left = part;
        for m in order {
            let u = u64::from(members[m].1);
            let n = (left / u).min(u64::from(free[m]));
            let n32 = u32::try_from(n).unwrap_or(u32::MAX);
            left -= n * u;
            s.quota[m] = s.quota[m].saturating_add(n32);
            free[m] -= n32;
        }
        s.left -= part - left;
    }
}

/// The borrow limit goes to the running jobs beyond the quota, then the pending ones.
fn borrow_to_jobs(s: &mut Split, j: &TeamJobs, members: &[(&str, u32)], limit: u64) {
    let mut left = limit;
    for (place, &(m, gpus)) in j.running.iter().enumerate() {
        let u = units(members, m, gpus);
        if !s.running_in[place] && u <= left {
            left -= u;
            s.borrow[m] = s.borrow[m].saturating_add(gpus);
        }
    }
    for (place, &(m, gpus, tasks)) in j.pending.iter().enumerate() {
        let u = units(members, m, gpus);
        let beyond = tasks - s.pending_in[place];
        if u == 0 || beyond == 0 {
            continue;
        }
        let n = u64::from(beyond).min(left / u);
        left -= n * u;
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        s.borrow[m] = s.borrow[m].saturating_add(n32.saturating_mul(gpus));
    }
}

/// The lend limit goes to the idle part of each type's quota, in member order.
fn lend_idle(s: &mut Split, members: &[(&str, u32)], limit: u64) {
    let mut left = limit;
    for (m, (_, u)) in members.iter().enumerate() {
        let idle = s.quota[m].saturating_sub(s.held[m]);
        let u = u64::from(*u);
        let n = u64::from(idle).min(left / u);
        left -= n * u;
        s.lend[m] = u32::try_from(n).unwrap_or(u32::MAX);
    }
}

/// The split written into the team's figures in place of the family's.
fn write_split(team: &mut Team, whole: &str, members: &[(&str, u32)], s: &Split) {
    team.quota.by_type.remove(whole);
    let unlimited = team.borrow_by_type.is_none();
    if let Some(b) = team.borrow_by_type.as_mut() {
        b.remove(whole);
    }
    if let Some(l) = team.lend_by_type.as_mut() {
        l.remove(whole);
    }
    for (m, (k, _)) in members.iter().enumerate() {
        team.quota.by_type.insert((*k).to_string(), s.quota[m]);
        if let Some(b) = team.borrow_by_type.as_mut() {
            b.insert((*k).to_string(), s.borrow[m]);
        }
        if let Some(l) = team.lend_by_type.as_mut() {
            l.insert((*k).to_string(), s.lend[m]);
        }
    }
    team.quota.total = sum(&team.quota.by_type);
    if !unlimited {
        team.borrow_limit = team.borrow_by_type.as_ref().map(sum);
    }
    team.lend_limit = team.lend_by_type.as_ref().map_or(0, sum);
}

/// The counts of a per-type table added up.
fn sum(m: &BTreeMap<String, u32>) -> u32 {
    m.values().fold(0u32, |a, n| a.saturating_add(*n))
}

/// The configuration a governor pass over `jobs` plans with, each family figure split per
/// type as the pass splits it; `None` when no team counts a family. For tools that show the
/// governor's figures (`accountd status`): jobs are placed by the type they name.
pub fn split_for(
    config: &Config,
    jobs: &[ClusterJob],
    capacity_by_type: &BTreeMap<String, u32>,
) -> Option<Config> {
    if config.governed_families().is_empty() {
        return None;
    }
    let mut pool_jobs: BTreeMap<&str, Vec<ClusterJob>> = BTreeMap::new();
    for j in jobs {
        if let Some(k) = j.gpu_type.as_deref() {
            pool_jobs.entry(k).or_default().push(j.clone());
        }
    }
    split_families(config, &pool_jobs, capacity_by_type)
}
