use super::*;
use crate::report::FairshareParams;

#[test]
fn parameters_come_from_the_configuration_as_slurm_names() {
    let config = teamshare_config::parse(
        r#"
[cluster]
name = "GPU-Cluster"
partitions = ["gpu"]
currency = "BRL"

[gpu_types.h100]
rate_per_hour = 70.0

[gpu_types.a100]
rate_per_hour = 30.0

[[team]]
name = "agents"
quota = { h100 = 2, a100 = 1 }
weight = 1

[[team]]
name = "training"
quota = { a100 = 4 }
weight = 3

[accountd]
borrowed_cost_factor = 0.5
idle_cost_split = "idle-row"
"#,
        "teamshare.toml",
    )
    .unwrap();
    let period = Period {
        since: 0,
        until: 3600,
    };
    let p = UsageParams::from_config(&config, period, 3600, vec!["AGENTS".into()]);
    assert_eq!(p.cluster, "gpu-cluster");
    assert_eq!(p.teams[0].name, "agents");
    assert_eq!(p.teams[0].quota, 3);
    assert_eq!(p.quota_sum(), 7);
    assert_eq!(p.teams[1].quota, 4);
    assert_eq!(
        p.quota_by_type,
        BTreeMap::from([("a100".to_string(), 5), ("h100".to_string(), 2)])
    );
    // Typed: per type, every team with its quota and lend limit of that type.
    let a100: Vec<(&str, u32, u32)> = p.typed_teams["a100"]
        .iter()
        .map(|t| (t.name.as_str(), t.quota, t.lend_limit))
        .collect();
    assert_eq!(a100, [("agents", 1, 1), ("training", 4, 4)]);
    assert_eq!(p.typed_teams["h100"][1].quota, 0);
    assert_eq!(p.typed_teams.len(), 2);
    assert_eq!(p.partitions, ["gpu"]);
    assert!(p.governs("gpu") && !p.governs("debug") && p.governs("debug,gpu"));
    assert_eq!(p.only, ["agents"]);
    assert_eq!(p.cost_rule.borrowed_cost_factor, 0.5);
    assert_eq!(
        p.cost_rule.idle_split,
        teamshare_config::IdleCostSplit::IdleRow
    );
    assert_eq!(p.rates.rate(Some("a100")), 30.0);
    assert_eq!(p.rates.key(Some("l4")), DEFAULT_RATE);
    let f = FairshareParams::from_config(&config, 10 * 86_400 * 7, None, vec![]);
    assert_eq!(f.since, 0); // default half-life 7 days, ten of them
    assert_eq!(f.weights["training"], 3);
    assert_eq!(f.partitions, ["gpu"]);
    assert_eq!(f.currency.as_deref(), Some("BRL"));
    // The GPU-seconds weigh their rates; a type without one (and no default) the highest.
    assert_eq!(f.rates.usage_weight(Some("h100")), 70.0);
    assert_eq!(f.rates.usage_weight(Some("l4")), 70.0);
    assert_eq!(f.rates.usage_weight(None), 70.0);
}

/// Issue 30: without capacity samples, the estimate counts a GPU family's quotas once. dev
/// and serve each hold an A100's worth; dev ran 7 `1g.10gb` slices (an A100's worth) and serve
/// one whole A100. Estimated: 7 slices and 1 A100, two A100s' worth as the quotas say; per
/// type alone it was 2 A100 and 7 slices, three A100s' worth.
#[test]
fn an_estimate_counts_a_family_quota_once_in_slices_and_whole_gpus() {
    use crate::report::tests::{run, H, T0};
    use crate::store::GpuTypes;
    let config = teamshare_config::parse(
        r#"
[cluster]
name = "c"

[gpu_types.a100]
rate_per_hour = 2.8

[gpu_types."1g.10gb"]
slices_of = "a100"
gpus = "1/7"

[[team]]
name = "dev"
quota = { a100 = 1 }

[[team]]
name = "serve"
quota = { a100 = 1 }
"#,
        "teamshare.toml",
    )
    .unwrap();
    let period = Period {
        since: T0,
        until: T0 + 2 * H,
    };
    let p = UsageParams::from_config(&config, period, T0 + 2 * H, Vec::new());
    let typed = |id, team: &str, gpu_type: &str, gpus: u64| {
        let mut r = run(id, team, 0, Some(2), gpus);
        r.gpus_by_type = GpuTypes::new(&BTreeMap::from([(gpu_type.to_string(), gpus)]));
        r
    };
    let runs = [typed(1, "dev", "1g.10gb", 7), typed(2, "serve", "a100", 1)];
    let r = compute_usage(&runs, &[], &p);
    let estimate = r.estimate.as_ref().unwrap();
    let parts: Vec<(&str, u32, u32, u32)> = estimate
        .by_type
        .iter()
        .map(|t| (t.gpu_type.as_str(), t.gpus, t.quotas, t.peak))
        .collect();
    assert_eq!(parts, [("1g.10gb", 7, 0, 7), ("a100", 1, 1, 1)]);
}
