//! Rule 1 (DESIGN §4): each team's ceiling, quota + borrow limit. The GPU limit a pass gives
//! each team, and the borrowed jobs a team runs beyond its ceiling.

use teamshare_config::{Config, Team};

use super::queues::{Entry, List};
use super::rules::Rules;
use super::running::Running;
use super::victims::victim_order;
use super::TeamState;

/// Rule 1 at all times: the borrowed jobs a team runs beyond its ceiling (quota + borrow
/// limit; an administrator lowered it under what the team runs), its lowest class and most
/// recently started first, only as many as bring it back to the ceiling.
pub(super) fn beyond_ceiling(
    rules: &Rules<'_>,
    team: &Team,
    running: &List<'_>,
    victims: &[usize],
    used: u32,
) -> Vec<u64> {
    let Some(ceiling) = team
        .borrow_limit
        .map(|b| team.quota.total.saturating_add(b))
    else {
        return Vec::new();
    };
    if used <= ceiling {
        return Vec::new();
    }
    let mut borrowed: Vec<Entry<'_>> = victims.iter().map(|i| running.get(*i)).collect();
    borrowed.sort_by(|a, b| victim_order(rules, (a, 0.0), (b, 0.0)));
    let mut over = used - ceiling;
    let mut out = Vec::new();
    for j in borrowed {
        if over == 0 {
            break;
        }
        over = over.saturating_sub(j.gpus);
        out.push(j.id);
    }
    out
}

/// Rules 1 and 4: each team's GPU limit is its quota (or what it runs, when more) plus its
/// allowance, never above quota + borrow limit; also written into its published state.
pub(super) fn team_gpu_limits(
    config: &Config,
    running: &Running<'_>,
    allowance: &[u32],
    team_states: &mut [TeamState],
) -> Vec<u32> {
    let mut gpu_limits = Vec::with_capacity(config.teams.len());
    for (i, t) in config.teams.iter().enumerate() {
        let used = running.usage[i];
        let mut limit = t.quota.total.max(used).saturating_add(allowance[i]);
        if let Some(b) = t.borrow_limit {
            limit = limit.min(t.quota.total.saturating_add(b));
        }
        gpu_limits.push(limit);
        if let Some(ts) = team_states.get_mut(i) {
            ts.gpu_limit = limit;
        }
    }
    gpu_limits
}
