//! Live-cluster tests: one throwaway Slurm cluster (contrib/cluster/start.sh) for the whole run.
//!
//! Run through `contrib/test.sh`, which builds the plugin (with the test-only panic feature)
//! and accountd first. If the cluster cannot start, every test fails: a skipped live test would
//! hide a broken product.

use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};
use teamshare_live_tests::Cluster;

mod accounting;
mod adversarial;
mod governance;
mod hostile;
mod scale;
mod skeleton;

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

    let listing = args.list;
    let cluster: Result<Arc<Cluster>, String> = if listing {
        Err("listing only".into())
    } else {
        Cluster::start().map(Arc::new)
    };

    let trials = scenarios
        .into_iter()
        .map(|(name, f)| {
            let cluster = cluster.clone();
            Trial::test(name, move || {
                let cluster = cluster.map_err(|e| Failed::from(format!("no live cluster: {e}")))?;
                let r = f(&cluster);
                cluster.cancel_submitted();
                if r.is_err() {
                    cluster.keep_logs();
                }
                r.map_err(Failed::from)
            })
        })
        .collect();

    let conclusion = libtest_mimic::run(&args, trials);
    if let Ok(c) = &cluster {
        if conclusion.has_failed() {
            c.keep_logs();
        }
    }
    // Drop the cluster (stop it) before exiting.
    drop(cluster);
    conclusion.exit_code()
}
