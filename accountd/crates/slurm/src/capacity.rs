//! The governed capacity C (DESIGN 4): the GPUs of usable nodes in the governed partitions, as
//! sinfo reports them now.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use teamshare_config::SHARE_TYPE;
use teamshare_policy::gres::{gpu_count, shard_count, GresError};

use crate::parsable::{self, MalformedLine, Shape};
use crate::slurm_cli::{SlurmCommand, SlurmCommandError};

const SINFO_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    #[error(transparent)]
    Sinfo(#[from] SlurmCommandError),
    #[error(transparent)]
    Malformed(#[from] MalformedLine),
    #[error("{0}")]
    Internal(String),
}

/// GPUs on usable nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capacity {
    pub total: u32,
    pub by_type: BTreeMap<String, u32>,
    pub usable_nodes: usize,
    /// GPUs per usable node (where a waiting job can be placed).
    pub per_node: BTreeMap<String, u32>,
    /// GPUs per type on each usable node whose GPUs carry a type (`gpu:h100:4`).
    pub per_node_types: BTreeMap<String, BTreeMap<String, u32>>,
    /// Nodes left out, with their state (down, drained...).
    pub unusable_nodes: Vec<(String, String)>,
    /// GPUs of nodes left out only because slurmctld has not heard from them (not responding,
    /// or its state unknown: just after slurmctld restarted, before each slurmd registers), in
    /// all and per type. Neither down nor drained, they still count for what a job could
    /// ever get (DESIGN §4 rule 7).
    pub unsettled_total: u32,
    pub unsettled_by_type: BTreeMap<String, u32>,
    /// Shards (`gres/shard`) on each usable node that offers some: counted apart from its
    /// GPUs, which they share, until [`Capacity::with_shares`] makes them a type.
    pub shards_per_node: BTreeMap<String, u32>,
}

impl Capacity {
    /// Where the configuration governs `gres/shard` (issue 30): the shards as GPUs of type
    /// [`SHARE_TYPE`], in `by_type` and each node's types (not in the totals: a shard is a
    /// share of a GPU counted there already).
    pub fn with_shares(mut self) -> Capacity {
        for (node, n) in std::mem::take(&mut self.shards_per_node) {
            let e = self.by_type.entry(SHARE_TYPE.to_string()).or_insert(0);
            *e = e.saturating_add(n);
            self.per_node_types
                .entry(node.clone())
                .or_default()
                .insert(SHARE_TYPE.to_string(), n);
            self.shards_per_node.insert(node, n);
        }
        self
    }
}

/// The sinfo invocation: one line per node and partition, `name|gres|compact state`.
pub fn sinfo_command(partitions: &[String]) -> SlurmCommand {
    let mut args = vec!["-h".to_string(), "-N".to_string()];
    if !partitions.is_empty() {
        args.push("-p".into());
        args.push(partitions.join(","));
    }
    args.push("-o".into());
    args.push("%N|%G|%t".into());
    SlurmCommand::new("sinfo", args, SINFO_TIMEOUT)
}

/// Measure the capacity of `partitions` with sinfo.
pub fn measure(partitions: &[String]) -> Result<Capacity, CapacityError> {
    let out = sinfo_command(partitions).run()?;
    parse_sinfo(&out.stdout)
}

/// Whether a node in compact state `state` (sinfo `%t`) can take new jobs.
///
/// Down, drained or draining, failed or failing, in maintenance (`maint`, or the `$` flag of a
/// maintenance reservation), not responding (`*`), or not a usable node at all
/// (`inval`, `unk`, `futr`) is not usable. A powered-down cloud node (`~`) is: it resumes on demand.
pub fn is_usable(state: &str) -> bool {
    let s = state.trim().to_ascii_lowercase();
    if s.ends_with('*') || s.ends_with('$') {
        return false;
    }
    let base = s.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    ![
        "down", "drain", "drng", "fail", "maint", "inval", "unk", "futr",
    ]
    .iter()
    .any(|bad| base.starts_with(bad))
}

/// Whether a node in compact state `state` is unusable only because slurmctld has not heard
/// from it: not responding (`*`) in an otherwise usable state, or unknown (`unk`).
pub fn is_unsettled(state: &str) -> bool {
    let s = state.trim().to_ascii_lowercase();
    let base = s.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    base.starts_with("unk") || (s.ends_with('*') && is_usable(base))
}

/// `%G` of sinfo (`gpu:h100:4(S:0-1),shard:8`, `gpu:2`, `(null)`) in the one GRES parser's
/// request form.
pub fn node_gpus(gres: &str) -> Result<teamshare_policy::gres::GpuCount, GresError> {
    gpu_count(&node_gres_spec(gres))
}

/// The shards of a node's `%G`.
pub fn node_shards(gres: &str) -> Result<u64, GresError> {
    shard_count(&node_gres_spec(gres))
}

/// `%G` in the GRES parser's request form.
fn node_gres_spec(gres: &str) -> String {
    // Drop the socket/index annotations in parentheses, which may contain commas themselves.
    let mut plain = String::with_capacity(gres.len());
    let mut depth = 0usize;
    for c in gres.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let spec: Vec<String> = plain
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty() && *e != "null")
        .map(|e| format!("gres:{e}"))
        .collect();
    spec.join(",")
}

pub fn parse_sinfo(text: &str) -> Result<Capacity, CapacityError> {
    let mut seen = BTreeSet::new();
    let mut cap = Capacity::default();
    for (number, line) in parsable::lines(text) {
        let malformed = |reason: String| MalformedLine::new("sinfo", number, reason, line);
        let [name, gres, state] = parsable::fields(line, Shape::Exactly)
            .map_err(|e| malformed(format!("{e} (node|gres|state)")))?;
        // A node in several governed partitions is listed once per partition.
        if !seen.insert(name.to_string()) {
            continue;
        }
        if !is_usable(state) {
            cap.unusable_nodes
                .push((name.to_string(), state.to_string()));
            if is_unsettled(state) {
                let gpus = node_gpus(gres).map_err(|e| malformed(e.to_string()))?;
                cap.unsettled_total = cap.unsettled_total.saturating_add(saturate(gpus.total));
                for (t, n) in gpus.by_type {
                    let e = cap.unsettled_by_type.entry(t).or_insert(0);
                    *e = e.saturating_add(saturate(n));
                }
            }
            continue;
        }
        let gpus = node_gpus(gres).map_err(|e| malformed(e.to_string()))?;
        let shards = node_shards(gres).map_err(|e| malformed(e.to_string()))?;
        if shards > 0 {
            cap.shards_per_node
                .insert(name.to_string(), saturate(shards));
        }
        cap.usable_nodes += 1;
        cap.total = cap.total.saturating_add(saturate(gpus.total));
        cap.per_node.insert(name.to_string(), saturate(gpus.total));
        for (t, n) in gpus.by_type {
            let e = cap.by_type.entry(t.clone()).or_insert(0);
            *e = e.saturating_add(saturate(n));
            cap.per_node_types
                .entry(name.to_string())
                .or_default()
                .insert(t, saturate(n));
        }
    }
    Ok(cap)
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states() {
        for ok in [
            "idle", "mix", "alloc", "comp", "resv", "idle~", "mix#", "plnd", "IDLE",
        ] {
            assert!(is_usable(ok), "{ok}");
        }
        for bad in [
            "down", "down*", "drain", "drng", "drain*", "fail", "failg", "maint", "idle*", "mix*",
            "inval", "unk*", "futr", "idle$", "down~",
        ] {
            assert!(!is_usable(bad), "{bad}");
        }
        // Not heard from (just after slurmctld restarted): neither down nor drained.
        for unsettled in ["idle*", "mix*", "alloc*", "unk", "unk*", "UNK*"] {
            assert!(is_unsettled(unsettled), "{unsettled}");
        }
        for settled in [
            "idle", "down*", "drain*", "drng*", "fail*", "maint*", "idle$", "futr",
        ] {
            assert!(!is_unsettled(settled), "{settled}");
        }
    }

    #[test]
    fn nodes_not_heard_from_are_unsettled_not_capacity() {
        let cap =
            parse_sinfo("n1|gpu:h100:4|idle*\nn2|gpu:a100:4|unk*\nn3|gpu:4|down*\nn4|gpu:2|mix\n")
                .unwrap();
        assert_eq!((cap.total, cap.unsettled_total), (2, 8));
        assert_eq!(
            cap.unsettled_by_type,
            BTreeMap::from([("a100".to_string(), 4), ("h100".to_string(), 4)])
        );
    }

    #[test]
    fn capacity_counts_gpus_of_usable_nodes_once() {
        let text = "\
n1|gpu:8|idle
n2|gpu:h100:4(S:0-1),gpu:a100:2(S:0,1),shard:8|mix
n3|gpu:8|down*
n4|gpu:8|drain
n5|(null)|idle
n1|gpu:8|idle
n6|gpu:4|idle*
";
        let c = parse_sinfo(text).unwrap();
        assert_eq!(c.total, 14);
        assert_eq!(c.by_type.get("h100"), Some(&4));
        assert_eq!(c.by_type.get("a100"), Some(&2));
        assert_eq!(c.usable_nodes, 3);
        assert_eq!(c.per_node["n2"], 6);
        assert_eq!(
            c.per_node_types["n2"],
            BTreeMap::from([("a100".to_string(), 2), ("h100".to_string(), 4)])
        );
        assert!(!c.per_node_types.contains_key("n1"));
        assert_eq!(c.per_node.get("n4"), None);
        let down: Vec<_> = c.unusable_nodes.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(down, ["n3", "n4", "n6"]);
    }

    #[test]
    fn bad_lines_are_errors() {
        assert!(matches!(
            parse_sinfo("n1 gpu:8 idle"),
            Err(CapacityError::Malformed(MalformedLine {
                line_number: 1,
                ..
            }))
        ));
        assert!(parse_sinfo("n1|gpu:x:y:z|idle").is_err());
    }

    #[test]
    fn the_command_names_the_partitions() {
        let c = sinfo_command(&["gpu".into(), "gpu-big".into()]);
        assert_eq!(c.display(), "sinfo -h -N -p gpu,gpu-big -o '%N|%G|%t'");
    }
}
