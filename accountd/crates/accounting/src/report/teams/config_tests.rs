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
