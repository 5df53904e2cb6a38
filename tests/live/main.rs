//! Live-cluster tests: one throwaway Slurm cluster (contrib/cluster/start.sh) for the whole run.
//!
//! Run through `contrib/test.sh`, which builds the plugin (with the test-only panic feature)
//! and accountd first. If the cluster cannot start, every test fails: a skipped live test would
//! hide a broken product.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::sync::{Arc, OnceLock};

use libtest_mimic::{Arguments, Failed, Trial};
use teamshare_live_tests::{Cluster, Spec};

mod accounting;
mod adversarial;
mod crash;
mod faults;
mod fractional;
mod governance;
mod hostile;
mod idle;
mod issue25;
mod monitoring;
mod packaging;
mod placement;
mod replay;
mod scale;
mod skeleton;
mod status;
mod typed;

type Scenario = fn(&Cluster) -> Result<(), String>;

fn main() -> std::process::ExitCode {
    let mut args = Arguments::from_args();
    // The scenarios share one cluster and count its GPUs: never run them concurrently.
    args.test_threads = Some(1);

    let mut scenarios: Vec<(&str, Scenario)> = skeleton::SCENARIOS.to_vec();
    scenarios.extend_from_slice(governance::SCENARIOS);
    scenarios.extend_from_slice(accounting::SCENARIOS);
    scenarios.extend_from_slice(hostile::SCENARIOS);
    scenarios.extend_from_slice(scale::SCENARIOS);
    scenarios.extend_from_slice(adversarial::SCENARIOS);
    scenarios.extend_from_slice(status::SCENARIOS);
    scenarios.extend_from_slice(monitoring::SCENARIOS);
    scenarios.extend_from_slice(replay::SCENARIOS);
    scenarios.extend_from_slice(issue25::SCENARIOS);
    scenarios.extend_from_slice(crash::SCENARIOS);
    scenarios.extend_from_slice(faults::SCENARIOS);

    // Each cluster is started by the first scenario that needs it (so a filtered run starts only
    // the clusters its scenarios use); if it cannot start, every scenario on it fails.
    let shared_cluster: Arc<OnceLock<Result<Arc<Cluster>, String>>> = Arc::new(OnceLock::new());
    // The per-GPU-type scenarios (and those of GPU shares) have a cluster of their own, and
    // so do the placement ones.
    let typed_cluster: Arc<OnceLock<Result<Arc<Cluster>, String>>> = Arc::new(OnceLock::new());
    let placement_cluster: Arc<OnceLock<Result<Arc<Cluster>, String>>> = Arc::new(OnceLock::new());
    let fractional_cluster: Arc<OnceLock<Result<Arc<Cluster>, String>>> = Arc::new(OnceLock::new());
    let shard_cluster: Arc<OnceLock<Result<Arc<Cluster>, String>>> = Arc::new(OnceLock::new());

    let run = |cluster: &OnceLock<Result<Arc<Cluster>, String>>,
               spec: &Spec,
               f: Scenario|
     -> Result<(), Failed> {
        let cluster = cluster
            .get_or_init(|| Cluster::start_with(spec).map(Arc::new))
            .clone()
            .map_err(|e| Failed::from(format!("no live cluster: {e}")))?;
        let started = std::time::Instant::now();
        let r = f(&cluster);
        // How long each scenario takes, for the CI budget (docs/benchmarks.md).
        eprint!("[{:.1} s] ", started.elapsed().as_secs_f64());
        cluster.cancel_submitted();
        if r.is_err() {
            cluster.keep_logs();
        }
        r.map_err(Failed::from)
    };
    let mut trials: Vec<Trial> = scenarios
        .into_iter()
        .map(|(name, f)| {
            let cluster = shared_cluster.clone();
            Trial::test(name, move || run(&cluster, &Spec::SHARED, f))
        })
        .collect();
    trials.extend(
        typed::SCENARIOS
            .iter()
            .chain(fractional::SCENARIOS)
            .map(|&(name, f)| {
                let cluster = typed_cluster.clone();
                Trial::test(name, move || run(&cluster, &Spec::TYPED, f))
            }),
    );
    trials.extend(
        placement::SCENARIOS
            .iter()
            .chain(idle::SCENARIOS)
            .map(|&(name, f)| {
                let cluster = placement_cluster.clone();
                Trial::test(name, move || run(&cluster, &Spec::PLACEMENT, f))
            }),
    );
    trials.extend(fractional::SLICES.iter().map(|&(name, f)| {
        let cluster = fractional_cluster.clone();
        Trial::test(name, move || run(&cluster, &Spec::FRACTIONAL, f))
    }));
    trials.extend(fractional::SHARDS.iter().map(|&(name, f)| {
        let cluster = shard_cluster.clone();
        Trial::test(name, move || run(&cluster, &Spec::SHARDS, f))
    }));
    // Scenarios that start what they need themselves (the Debian packages and their cluster).
    trials.extend(packaging::SCENARIOS.iter().map(|&(name, f)| {
        Trial::test(name, move || {
            let started = std::time::Instant::now();
            let r = f();
            eprint!("[{:.1} s] ", started.elapsed().as_secs_f64());
            r.map_err(Failed::from)
        })
    }));

    let conclusion = libtest_mimic::run(&args, trials);
    for c in [
        shared_cluster.get(),
        typed_cluster.get(),
        placement_cluster.get(),
        fractional_cluster.get(),
        shard_cluster.get(),
    ]
    .into_iter()
    .flatten()
    .filter_map(|r| r.as_ref().ok())
    {
        if conclusion.has_failed() {
            c.keep_logs();
        }
    }
    // Drop the clusters (stop them) before exiting.
    drop(shared_cluster);
    drop(typed_cluster);
    drop(placement_cluster);
    conclusion.exit_code()
}
