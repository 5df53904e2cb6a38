//! What Slurm offers a configuration: its partitions and the GPUs configured on their nodes,
//! whatever the nodes' state (issue 25, finding 4).
//!
//! A reloaded teamshare.toml that names a partition Slurm does not have (a typo), a quota of a
//! GPU type no node of the governed partitions offers, or partitions without a single GPU
//! would leave the real partition ungoverned. The governor reads these figures from Slurm and
//! publishes them in its state; the governor (on its own reload) and the plugin (from that
//! state) refuse such a file with the same words and keep the last good configuration.
//! Drained or down nodes count here: a maintenance that drains a whole partition is not a
//! reason to refuse an edit (rule 8 shrinks the capacity instead).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use teamshare_config::Config;

/// One partition's GPUs, on every node it has.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionGpus {
    pub gpus: u32,
    /// Typed GPUs per type (`gpu:h100:4` counts 4 under `h100`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_type: BTreeMap<String, u32>,
}

/// Every partition Slurm has, by name.
pub type Offered = BTreeMap<String, PartitionGpus>;

/// Why `config` cannot govern the cluster Slurm describes in `offered`, one reason each; empty
/// when it can.
pub fn refusals(config: &Config, offered: &Offered) -> Vec<String> {
    let mut out = Vec::new();
    let governed = &config.cluster.partitions;
    let missing: Vec<&str> = governed
        .iter()
        .filter(|p| !offered.contains_key(*p))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        let have: Vec<&str> = offered.keys().map(String::as_str).collect();
        out.push(format!(
            "[cluster] partitions names {} that Slurm does not have (its partitions: {})",
            quoted(&missing),
            if have.is_empty() {
                "none".to_string()
            } else {
                have.join(", ")
            }
        ));
    }
    let present: Vec<&PartitionGpus> = governed.iter().filter_map(|p| offered.get(p)).collect();
    let gpus: u64 = present.iter().map(|p| u64::from(p.gpus)).sum();
    if missing.len() < governed.len() && gpus == 0 {
        out.push(format!(
            "partition{} {} hold{} no GPU: nothing would be governed",
            if governed.len() == 1 { "" } else { "s" },
            governed.join(", "),
            if governed.len() == 1 { "s" } else { "" },
        ));
    }
    let types: BTreeSet<&str> = present
        .iter()
        .flat_map(|p| p.by_type.keys().map(String::as_str))
        .collect();
    let mut unknown: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for team in &config.teams {
        for (t, n) in &team.quota.by_type {
            // A family's quota (issue 30) is offered where any of its types is: an A100's
            // worth may be slices only.
            let offered = types.contains(t.as_str())
                || config
                    .family_members(t)
                    .iter()
                    .any(|(k, _)| types.contains(k));
            if *n > 0 && !offered {
                unknown
                    .entry(t.as_str())
                    .or_default()
                    .push(team.name.as_str());
            }
        }
    }
    if gpus > 0 {
        for (t, teams) in unknown {
            out.push(format!(
                "GPU type \"{t}\" (the quota of {}) is on no node of partition{} {} (types there: {})",
                teams.join(", "),
                if governed.len() == 1 { "" } else { "s" },
                governed.join(", "),
                if types.is_empty() {
                    "none, the GPUs are untyped".to_string()
                } else {
                    types.iter().copied().collect::<Vec<_>>().join(", ")
                }
            ));
        }
    }
    out
}

/// [`refusals`] as one log line, `None` when there is none.
pub fn refusal(config: &Config, offered: &Offered) -> Option<String> {
    let r = refusals(config, offered);
    (!r.is_empty()).then(|| r.join("; "))
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        teamshare_config::parse(text, "teamshare.toml").expect("valid")
    }

    /// A partition's name, GPUs, and GPUs per type.
    type Part<'a> = (&'a str, u32, &'a [(&'a str, u32)]);

    fn offered(parts: &[Part<'_>]) -> Offered {
        parts
            .iter()
            .map(|(name, gpus, types)| {
                (
                    (*name).to_string(),
                    PartitionGpus {
                        gpus: *gpus,
                        by_type: types.iter().map(|(t, n)| ((*t).to_string(), *n)).collect(),
                    },
                )
            })
            .collect()
    }

    const UNTYPED: &str =
        "[cluster]\nname = \"c\"\npartitions = [\"PART\"]\n\n[[team]]\nname = \"a\"\nquota = 1\n";

    #[test]
    fn issue25_4_a_partition_slurm_does_not_have_is_refused() {
        let slurm = offered(&[("gpu", 8, &[]), ("cpu", 0, &[])]);
        assert_eq!(
            refusals(&config(&UNTYPED.replace("PART", "gpu")), &slurm),
            Vec::<String>::new()
        );
        let why = refusal(&config(&UNTYPED.replace("PART", "nosuch")), &slurm).unwrap();
        assert!(why.contains("\"nosuch\""), "{why}");
        assert!(why.contains("its partitions: cpu, gpu"), "{why}");
        // Only the one reason: the zero GPUs of a partition that does not exist are not said.
        assert_eq!(
            refusals(&config(&UNTYPED.replace("PART", "nosuch")), &slurm).len(),
            1
        );
    }

    #[test]
    fn issue25_4_partitions_without_a_gpu_are_refused_drained_ones_are_not() {
        let slurm = offered(&[("gpu", 8, &[]), ("cpu", 0, &[])]);
        let why = refusal(&config(&UNTYPED.replace("PART", "cpu")), &slurm).unwrap();
        assert!(why.contains("no GPU"), "{why}");
        // The figures count every node, whatever its state: a drained partition still has its
        // GPUs here, so it is accepted.
        let drained = offered(&[("gpu", 8, &[])]);
        assert!(refusal(&config(&UNTYPED.replace("PART", "gpu")), &drained).is_none());
    }

    #[test]
    fn issue25_4_a_quota_of_a_type_no_node_offers_is_refused() {
        let text = "[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n\n[gpu_types.h100]\nrate_per_hour = 1\n\n[gpu_types.a100]\nrate_per_hour = 1\n\n[[team]]\nname = \"a\"\nquota = { h100 = 1, a100 = 1 }\n";
        let c = config(text);
        let both = offered(&[("gpu", 8, &[("h100", 4), ("a100", 4)])]);
        assert!(refusal(&c, &both).is_none());
        let h100_only = offered(&[("gpu", 4, &[("h100", 4)])]);
        let why = refusal(&c, &h100_only).unwrap();
        assert!(why.contains("\"a100\" (the quota of a)"), "{why}");
        assert!(why.contains("types there: h100"), "{why}");
    }

    /// Issue 30: a family's quota (an A100's worth) is offered by slices alone.
    #[test]
    fn a_family_quota_is_offered_by_any_of_its_types() {
        let text = "[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n\n[gpu_types.a100]\nrate_per_hour = 1\n\n[gpu_types.\"1g.10gb\"]\nslices_of = \"a100\"\ngpus = \"1/7\"\n\n[[team]]\nname = \"a\"\nquota = { a100 = 1 }\n";
        let c = config(text);
        let sliced = offered(&[("gpu", 7, &[("1g.10gb", 7)])]);
        assert!(refusal(&c, &sliced).is_none());
        let other = offered(&[("gpu", 4, &[("h100", 4)])]);
        assert!(refusal(&c, &other).is_some());
    }
}
