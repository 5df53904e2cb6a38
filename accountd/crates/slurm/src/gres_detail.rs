//! Where a running job's shards are: the GPU each node gave them (issue 30). slurmctld
//! describes a running job's generic resources per node (`gres_detail_str`, what `scontrol
//! show job -d` prints as `GRES=`), sent only when asked for with `SHOW_DETAIL`. Read in
//! Slurm's source (`gres_ctld_job_build_details` in 22.05, `gres_stepmgr_job_build_details`
//! from 24.11) and seen live (docs/design/fractional-gpus.md):
//!
//! - 22.05: `shard:3(IDX:0)`, the indices of the GPUs the shards sit on as a bit list
//!   (`0-1,3`);
//! - from 24.11: `shard:2(0/4,2/4,0/4,0/4)`, per GPU of the node the shards this job holds
//!   there over the shards that GPU offers;
//! - typed (`shard:a100:2(...)`), several resources joined by commas
//!   (`gpu:a100:1(IDX:0),shard:...`), or a count without place (`shard(CNT:2)`: unknown).

use teamshare_config::SHARE_TYPE;
use teamshare_policy::governance::{ClusterJob, Phase, ShardPlaces};

use crate::job_record::Records;
use crate::squeue::expand_hostlist;

/// The most GPU indices read from one entry: a node has far fewer GPUs; a list beyond it is
/// not Slurm's (nothing is read from it).
const MAX_GPUS: u32 = 1024;

/// The GPUs of one node's detail that hold this job's shards; `None` where the detail names
/// no shard or gives no place for them.
pub fn shard_gpus(detail: &str) -> Option<Vec<u32>> {
    let entry = entries(detail).find(|e| {
        let name = e.split([':', '(']).next().unwrap_or("");
        name.trim() == SHARE_TYPE
    })?;
    let open = entry.find('(')?;
    let inner = entry[open + 1..].strip_suffix(')')?;
    let gpus = match inner.strip_prefix("IDX:") {
        Some(list) => bit_list(list)?,
        None => per_gpu(inner)?,
    };
    (!gpus.is_empty()).then_some(gpus)
}

/// The entries of a detail: split at the commas outside parentheses.
fn entries(detail: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0i32;
    let mut start = 0;
    let mut out = Vec::new();
    for (i, c) in detail.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&detail[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&detail[start..]);
    out.into_iter()
}

/// A bit list as Slurm's `bit_fmt` writes it: `0`, `0-1,3`.
fn bit_list(list: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in list.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let a = part.trim().parse::<u32>().ok()?;
                (a, a)
            }
        };
        if a > b || b >= MAX_GPUS {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

/// Per GPU, held over offered (`0/4,2/4`): the GPUs where this job holds any.
fn per_gpu(list: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for (i, part) in list.split(',').enumerate() {
        let (held, _) = part.split_once('/')?;
        let i = u32::try_from(i).ok().filter(|i| *i < MAX_GPUS)?;
        if held.trim().parse::<u64>().ok()? > 0 {
            out.push(i);
        }
    }
    Some(out)
}

/// Where the running shard jobs among `jobs` (read from `records`) hold their shards: per
/// job, each node and GPU. A job whose records give no detail for every node (read without
/// `SHOW_DETAIL`, or by squeue's text) is left out: its place is unknown.
pub fn shard_places(records: &Records, jobs: &[ClusterJob]) -> ShardPlaces {
    let wanted: std::collections::BTreeSet<u64> = jobs
        .iter()
        .filter(|j| j.phase == Phase::Running && j.gpu_type.as_deref() == Some(SHARE_TYPE))
        .map(|j| j.id)
        .collect();
    let mut out = ShardPlaces::new();
    if wanted.is_empty() {
        return out;
    }
    for r in records.jobs().filter(|r| wanted.contains(&r.id)) {
        let Some(nodes) = expand_hostlist(&r.node_list) else {
            continue;
        };
        if nodes.len() != r.gres_detail.len() {
            continue;
        }
        let places: Option<Vec<(String, u32)>> = nodes
            .into_iter()
            .zip(&r.gres_detail)
            .map(|(node, d)| Some(shard_gpus(d)?.into_iter().map(move |g| (node.clone(), g))))
            .try_fold(Vec::new(), |mut acc, it| {
                acc.extend(it?);
                Some(acc)
            });
        if let Some(places) = places {
            out.insert(r.id, places);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_release_form_names_the_gpus_that_hold_the_shards() {
        assert_eq!(shard_gpus("shard:3(IDX:0)"), Some(vec![0]));
        assert_eq!(shard_gpus("shard:2(IDX:1)"), Some(vec![1]));
        assert_eq!(shard_gpus("shard:6(IDX:0-1,3)"), Some(vec![0, 1, 3]));
        assert_eq!(shard_gpus("shard:2(0/4,2/4,0/4,0/4)"), Some(vec![1]));
        assert_eq!(shard_gpus("shard:a100:4(4/4,0/4)"), Some(vec![0]));
        assert_eq!(
            shard_gpus("gpu:a100:1(IDX:0),shard:1(0/4,0/4,1/4)"),
            Some(vec![2])
        );
    }

    #[test]
    fn no_place_given_is_no_place_read() {
        for d in [
            "",
            "gpu:a100:2(IDX:0-1)",
            "shard(CNT:2)",
            "shard:2(0/4,0/4)",
            "shard:2(IDX:x)",
            "shard:2(IDX:3-1)",
            "shard:2(IDX:0-99999)",
            "shard:2(2-4)",
            "shard:2(IDX:0",
            "shards:2(IDX:0)",
        ] {
            assert_eq!(shard_gpus(d), None, "{d:?}");
        }
    }
}
