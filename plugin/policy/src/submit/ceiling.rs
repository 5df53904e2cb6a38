//! What a team may ever hold (rule 7) and what is left of its quota, where the team counts
//! GPUs per type or counts a GPU family in GPU-equivalents (issue 30): a family's figures are
//! compared in units of 1/D of a GPU, so that 1 A100's worth holds 7 `1g.10gb` slices, or a
//! whole A100, and not both. No allocation here: this is the submit path.

use std::collections::BTreeMap;

use teamshare_config::{names_type, Config, Member, Team};

use super::Admitted;
use super::{reject, RejectKind, Rejection};
use crate::governance::PublishedState;

/// The most GPUs (of `gpu_type`, in a typed configuration) `team` may ever hold, with the
/// quota and borrow limit it is made of; `None` without a borrow limit. For a family the
/// figures are the family's (in GPUs' worth) and the most is in GPUs of `gpu_type`.
fn team_ceiling(config: &Config, team: &Team, gpu_type: Option<&str>) -> Option<(u64, u32, u32)> {
    let (quota, borrow) = match gpu_type {
        Some(k) => match family(config, team, k) {
            Some(m) => {
                let (q, b) = (team.quota_of(m.whole), team.borrow_limit_for(m.whole)?);
                let units = (u64::from(q) + u64::from(b)) * u64::from(m.per_gpu);
                return Some((units / u64::from(m.units.max(1)), q, b));
            }
            None => (team.quota_of(k), team.borrow_limit_for(k)?),
        },
        None => (team.quota.total, team.borrow_limit?),
    };
    Some((u64::from(quota) + u64::from(borrow), quota, borrow))
}

/// The family `gpu_type` is counted in for `team`, if it counts one.
fn family<'c>(config: &'c Config, team: &Team, gpu_type: &'c str) -> Option<Member<'c>> {
    config
        .family_of(gpu_type)
        .filter(|m| names_type(team, m.whole))
}

/// Whether `team` counts any GPU family in GPU-equivalents: its total in GPUs then counts a
/// slice as a GPU, and says nothing.
fn counts_any_family(config: &Config, team: &Team) -> bool {
    team.quota
        .by_type
        .keys()
        .chain(team.borrow_by_type.iter().flat_map(BTreeMap::keys))
        .any(|k| config.family_units(k).is_some())
}

/// The refusal of a job asking for more than `team` may ever hold.
pub(crate) fn over_ceiling(
    config: &Config,
    team: &Team,
    gpu_type: Option<&str>,
    asked: u64,
    what: impl FnOnce() -> String,
) -> Option<Rejection> {
    if gpu_type.is_none() && counts_any_family(config, team) {
        return None;
    }
    let (ceiling, quota, borrow) = team_ceiling(config, team, gpu_type)?;
    (asked > ceiling).then(|| {
        // One format! per refusal: a message built in pieces costs an allocation each.
        let message = match gpu_type {
            Some(k) => match family(config, team, k) {
                Some(m) => format!(
                    "teamshare: team {} may hold at most {ceiling} {k} GPUs ({} family quota {quota} + borrow limit {borrow} GPU-equivalents; a {k} is {} of a GPU); {}",
                    team.name,
                    m.whole,
                    size(&m),
                    what()
                ),
                None => format!(
                    "teamshare: team {} may hold at most {ceiling} {k} GPUs ({k} quota {quota} + borrow limit {borrow}); {}",
                    team.name,
                    what()
                ),
            },
            None => format!(
                "teamshare: team {} may hold at most {ceiling} GPUs (quota {quota} + borrow limit {borrow}); {}",
                team.name,
                what()
            ),
        };
        reject(RejectKind::OverTeamLimit, message)
    })
}

/// A member's size as a fraction of its family's GPU, `1/7`.
fn size(m: &Member<'_>) -> String {
    let g = gcd(m.units, m.per_gpu).max(1);
    format!("{}/{}", m.units / g, m.per_gpu / g)
}

const fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A heterogeneous job's components of one family, together, against the family's ceiling
/// in units (`asked` holds GPUs per (team, type)).
pub(crate) fn over_family_ceiling(
    config: &Config,
    team: &Team,
    gpu_type: Option<&str>,
    asked: &BTreeMap<(String, String), u64>,
) -> Option<Rejection> {
    let m = family(config, team, gpu_type?)?;
    let borrow = team.borrow_limit_for(m.whole)?;
    let most = (u64::from(team.quota_of(m.whole)) + u64::from(borrow)) * u64::from(m.per_gpu);
    let units: u64 = asked
        .iter()
        .filter(|((t, _), _)| *t == team.name)
        .filter_map(|((_, k), n)| {
            let o = config.family_of(k).filter(|o| o.whole == m.whole)?;
            Some(n.saturating_mul(u64::from(o.units)))
        })
        .fold(0u64, u64::saturating_add);
    (units > most).then(|| {
        reject(
            RejectKind::OverTeamLimit,
            format!(
                "teamshare: team {} may hold at most {} GPU-equivalents of the {} family (quota {} + borrow limit {borrow}); the components of this heterogeneous job ask for {} together",
                team.name,
                teamshare_config::format_equivalents(most, m.per_gpu),
                m.whole,
                team.quota_of(m.whole),
                teamshare_config::format_equivalents(units, m.per_gpu),
            ),
        )
    })
}

/// GPUs of `gpu_type` left in `team`'s family quota: the family's units less what its running,
/// pending-in-quota and just-admitted jobs of every member type hold, in `gpu_type`'s GPUs.
pub(crate) fn family_room(
    config: &Config,
    state: &PublishedState,
    admitted: &Admitted,
    team: &Team,
    gpu_type: &str,
) -> u32 {
    let Some(m) = config.family_of(gpu_type) else {
        return 0;
    };
    let quota = team.family_quota_units(&m);
    let mut held = 0u64;
    for k in config.gpu_types.keys() {
        let Some(o) = config.family_of(k).filter(|o| o.whole == m.whole) else {
            continue;
        };
        let (running, pending) = state
            .pools
            .get(k)
            .and_then(|p| p.teams.get(&team.name))
            .map_or((0, 0), |t| (t.running_gpus, t.pending_in_quota_gpus));
        let gpus =
            u64::from(running) + u64::from(pending) + u64::from(admitted.team(k, &team.name));
        held = held.saturating_add(gpus * u64::from(o.units));
    }
    let room = quota.saturating_sub(held) / u64::from(m.units.max(1));
    u32::try_from(room).unwrap_or(u32::MAX)
}
