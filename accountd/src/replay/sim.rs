//! The simulation (see the module `replay`).

use teamshare_config::Config;

use super::{Cluster, Outcome, Secs, SimParams, Trace};

/// Replay `trace` under `config`. `progress` is told the simulated time now and then.
pub fn simulate(
    trace: &Trace,
    config: &Config,
    params: &SimParams,
    progress: &mut dyn FnMut(Secs),
) -> Outcome {
    let _ = (trace, config, params, progress);
    todo!("the simulator")
}

/// The usable GPUs over time as steps `(from, gpus)`, starting at `since` with every node of
/// `total` GPUs and each drain taking its node's GPUs away while it lasts.
pub fn capacity_steps(cluster: &Cluster, since: Secs, total: u32) -> Vec<(Secs, u32)> {
    let mut changes: Vec<(Secs, i64)> = Vec::new();
    for d in &cluster.drains {
        let gpus = cluster
            .nodes
            .iter()
            .find(|n| n.name == d.node)
            .map_or(0, |n| i64::from(n.gpus));
        changes.push((d.since.max(since), -gpus));
        changes.push((d.until.max(since), gpus));
    }
    changes.sort_unstable();
    let mut steps = vec![(since, total)];
    let mut now = i64::from(total);
    for (t, delta) in changes {
        now += delta;
        let gpus = u32::try_from(now.max(0)).unwrap_or(0);
        match steps.last_mut() {
            Some(last) if last.0 == t => last.1 = gpus,
            _ => steps.push((t, gpus)),
        }
    }
    steps
}
