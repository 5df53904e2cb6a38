//! Curve points are valid configurations: the working by hand in each test.

use super::*;
use crate::replay::NodeSpec;

const CONFIG: &str = r#"
[cluster]
name = "c"
partitions = ["gpu"]

[[team]]
name = "research"
quota = 5
lend_limit = 5

[[team]]
name = "training"
quota = 3

[[team]]
name = "agents"
quota = 2
lend_limit = 1
"#;

const TYPED: &str = r#"
[cluster]
name = "c"
partitions = ["gpu"]

[gpu_types.h100]
rate_per_hour = 4.0

[gpu_types.a100]
rate_per_hour = 2.0

[[team]]
name = "research"
quota = { h100 = 4, a100 = 2 }

[[team]]
name = "training"
quota = { h100 = 4 }

[[team]]
name = "agents"
quota = { a100 = 2 }
"#;

fn cluster(nodes: &[(u32, Option<&str>)]) -> Cluster {
    Cluster {
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(i, (gpus, t))| NodeSpec {
                name: format!("n{:02}", i + 1),
                gpus: *gpus,
                gpu_type: t.map(str::to_string),
            })
            .collect(),
        drains: Vec::new(),
    }
}

fn parse(text: &str) -> Config {
    teamshare_config::parse(text, "teamshare.toml").unwrap()
}

#[test]
fn largest_remainder_sums_to_the_target_and_moves_each_by_less_than_one() {
    // 5, 3, 2 (sum 10) into 7: exact 3.5, 2.1, 1.4 -> floors 3, 2, 1 (6); the one left goes to
    // the largest fraction, 0.5 (research): 4, 2, 1.
    assert_eq!(shrink(&[5, 3, 2], 7), [4, 2, 1]);
    // Fits: unchanged.
    assert_eq!(shrink(&[5, 3, 2], 10), [5, 3, 2]);
    assert_eq!(shrink(&[5, 3, 2], 12), [5, 3, 2]);
    // Equal fractions: the earlier first. 1, 1, 1 into 2: 0.67 each -> 1, 1, 0.
    assert_eq!(shrink(&[1, 1, 1], 2), [1, 1, 0]);
    assert_eq!(shrink(&[4, 4], 0), [0, 0]);
}

#[test]
fn quotas_above_a_smaller_capacity_are_scaled_into_a_valid_configuration() {
    let config = parse(CONFIG);
    // 10 GPUs of quota; the cluster keeps 8 of 12.
    let full = cluster(&[(4, None), (4, None), (4, None)]);
    let small = fewer_gpus(&full, 4);
    assert_eq!(capacity_of(&small).0, 8);
    let (same, how) = config_at(&config, &full, QuotaRule::Scale).unwrap();
    assert_eq!((same == config, how.as_str()), (true, "as configured"));
    let (scaled, how) = config_at(&config, &small, QuotaRule::Scale).unwrap();
    // 5, 3, 2 into 8: exact 4.0, 2.4, 1.6 -> 4, 2, 1 and the last GPU to agents (0.6).
    let quotas: Vec<u32> = scaled.teams.iter().map(|t| t.quota.total).collect();
    assert_eq!(quotas, [4, 2, 2]);
    assert_eq!(how, "scaled to 8 of 10 GPUs");
    // Lend limits at most the new quotas: research 5 -> 4; agents 1 stays.
    assert_eq!(scaled.teams[0].lend_limit, 4);
    assert_eq!(scaled.teams[2].lend_limit, 1);
    assert!(scaled.check_capacity(8, &BTreeMap::new()).is_empty());
    // Keep: the same point is refused with check-config's reason.
    let e = config_at(&config, &small, QuotaRule::Keep).unwrap_err();
    assert!(
        e.starts_with("the sum of quotas (10 GPUs) is above the governed capacity (8 GPUs)"),
        "{e}"
    );
}

#[test]
fn typed_quotas_scale_per_type() {
    let config = parse(TYPED);
    // 8 h100 + 4 a100 -> take one a100 node and 2 of an h100 node's GPUs away: nodes n1, n2
    // (h100 4 + 4) and n3 (a100 4) ... fewer_gpus takes n3 (4) then 2 of n2: h100 6, a100 0.
    let full = cluster(&[(4, Some("h100")), (4, Some("h100")), (4, Some("a100"))]);
    let small = fewer_gpus(&full, 6);
    let (total, by_type) = capacity_of(&small);
    assert_eq!(
        (total, by_type.get("h100"), by_type.get("a100")),
        (6, Some(&6), None)
    );
    let (scaled, _) = config_at(&config, &small, QuotaRule::Scale).unwrap();
    // h100: 4 + 4 into 6 -> 3, 3. a100: 2 + 2 into 0 -> 0, 0. Totals 3, 3, 0.
    let r = &scaled.teams[0];
    assert_eq!(
        (r.quota_of("h100"), r.quota_of("a100"), r.quota.total),
        (3, 0, 3)
    );
    assert_eq!(scaled.teams[1].quota.total, 3);
    assert_eq!(scaled.teams[2].quota.total, 0);
    assert!(scaled.check_capacity(total, &by_type).is_empty());
    // Where one type still fits it is left alone: 2 GPUs fewer leaves h100 8 and a100 2.
    let (scaled, how) = config_at(&config, &fewer_gpus(&full, 2), QuotaRule::Scale).unwrap();
    let quotas: Vec<(u32, u32)> = scaled
        .teams
        .iter()
        .map(|t| (t.quota_of("h100"), t.quota_of("a100")))
        .collect();
    // a100: 2 + 2 into 2: 1, 1.
    assert_eq!(quotas, [(4, 1), (4, 0), (0, 1)]);
    assert_eq!(how, "scaled to 10 of 12 GPUs");
}

#[test]
fn the_default_step_is_the_trace_s_own_node_size() {
    let mut trace = Trace {
        jobs: Vec::new(),
        cluster: cluster(&[(1, None), (1, None), (1, None), (8, None)]),
        since: 0,
        until: 1,
        source: String::new(),
        activity: None,
    };
    assert_eq!(default_step(&trace), 1);
    trace.cluster = cluster(&[(4, None), (4, None), (2, None)]);
    assert_eq!(default_step(&trace), 4);
}

/// A configuration of `quotas` (untyped), each team lending `lend` of its quota.
fn untyped(quotas: &[u32], lend: u32) -> Config {
    let mut text = String::from("[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n");
    for (i, q) in quotas.iter().enumerate() {
        text += &format!(
            "\n[[team]]\nname = \"t{i}\"\nquota = {q}\nlend_limit = {}\n",
            lend.min(*q)
        );
    }
    parse(&text)
}

proptest::proptest! {
    /// Curve points are valid configurations: whatever the quotas and the GPUs taken away,
    /// `scale` gives one that check-config accepts at that capacity, no quota grows, nothing
    /// changes where the quotas fit, and the sum is exactly what fits where they do not;
    /// `keep` gives the configuration unchanged or refuses the point.
    #[test]
    fn curve_points_are_valid_configurations(
        quotas in proptest::collection::vec(0u32..40, 1..8),
        lend in 0u32..40,
        nodes in proptest::collection::vec(1u32..9, 1..12),
        remove in 0u32..100,
    ) {
        let config = untyped(&quotas, lend);
        let full = cluster(&nodes.iter().map(|g| (*g, None)).collect::<Vec<_>>());
        let small = fewer_gpus(&full, remove);
        let (cap, by_type) = capacity_of(&small);
        let sum: u32 = quotas.iter().sum();
        let (scaled, _) = config_at(&config, &small, QuotaRule::Scale).unwrap();
        proptest::prop_assert!(scaled.check_capacity(cap, &by_type).is_empty());
        for (a, b) in config.teams.iter().zip(&scaled.teams) {
            proptest::prop_assert!(b.quota.total <= a.quota.total);
            proptest::prop_assert!(b.lend_limit <= b.quota.total);
        }
        proptest::prop_assert_eq!(scaled.total_quota(), sum.min(cap));
        if sum <= cap {
            proptest::prop_assert_eq!(&scaled, &config);
        }
        match config_at(&config, &small, QuotaRule::Keep) {
            Ok((kept, how)) => {
                proptest::prop_assert!(sum <= cap);
                proptest::prop_assert_eq!(&kept, &config);
                proptest::prop_assert_eq!(how, "as configured");
            }
            Err(_) => proptest::prop_assert!(sum > cap),
        }
    }
}
