//! GPU counts in Slurm TRES/GRES strings: the one parser for every form the project meets.
//!
//! Forms seen on Slurm 22.05 and later:
//! - job requests: `gres:gpu:8`, `gres:gpu:h100:2` (22.05), `gres/gpu:8`, `gres/gpu:h100:2` (23.02+),
//!   several entries separated by `,` or `;`, other TRES (`gres:shard:2`, `license/x:1`) ignored;
//! - accounting (`AllocTRES`/`ReqTRES` of sacct): `billing=1,cpu=1,gres/gpu=2,gres/gpu:h100=2,node=1`,
//!   where typed entries repeat the untyped total.

use std::collections::BTreeMap;
use std::fmt;

/// GPUs counted in one TRES string: the total and, where the string names types, per type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuCount {
    pub total: u64,
    pub by_type: BTreeMap<String, u64>,
}

impl GpuCount {
    pub fn is_zero(&self) -> bool {
        self.total == 0
    }

    /// Multiply every count (per-node requests times nodes, per-task times tasks).
    pub fn times(&self, factor: u64) -> GpuCount {
        GpuCount {
            total: self.total.saturating_mul(factor),
            by_type: self
                .by_type
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_mul(factor)))
                .collect(),
        }
    }

    pub fn add(&mut self, other: &GpuCount) {
        self.total = self.total.saturating_add(other.total);
        for (k, v) in &other.by_type {
            let e = self.by_type.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresError {
    pub entry: String,
    pub reason: &'static str,
}

impl fmt::Display for GresError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot read GPU count in `{}`: {}",
            self.entry, self.reason
        )
    }
}

impl std::error::Error for GresError {}

/// Count the GPUs in a TRES/GRES string of any of the forms above.
///
/// A missing count (`gres:gpu`) means one GPU, as Slurm reads it. Untyped and typed entries are
/// combined the way Slurm means them: in accounting strings the typed entries are a breakdown of
/// the untyped total; in requests a typed entry is its own request.
pub fn gpu_count(spec: &str) -> Result<GpuCount, GresError> {
    let mut untyped: Option<u64> = None;
    let mut typed: BTreeMap<String, u64> = BTreeMap::new();
    for raw in spec.split([',', ';']) {
        let entry = raw.trim();
        if entry.is_empty() {
            continue;
        }
        // Accounting form `name=count`, request form `name:count` (or no count).
        let (name, count) = match entry.split_once('=') {
            Some((name, count)) => (name, Some(count)),
            None => split_request_count(entry),
        };
        let rest = if let Some(r) = name.strip_prefix("gres/gpu") {
            r
        } else if let Some(r) = name.strip_prefix("gres:gpu") {
            r
        } else {
            continue;
        };
        let gpu_type = match rest {
            "" => None,
            r => match r.strip_prefix(':') {
                Some(t) if !t.is_empty() && !t.contains(':') => Some(t),
                // `gres/gpumem`, `gres:gpu_x`: another GRES whose name starts with gpu.
                None => continue,
                _ => {
                    return Err(GresError {
                        entry: entry.to_string(),
                        reason: "malformed GPU type",
                    })
                }
            },
        };
        let count = match count {
            None => 1,
            Some(c) => parse_count(c).ok_or_else(|| GresError {
                entry: entry.to_string(),
                reason: "count is not a non-negative integer",
            })?,
        };
        match gpu_type {
            None => untyped = Some(untyped.unwrap_or(0).saturating_add(count)),
            Some(t) => {
                let e = typed.entry(t.to_string()).or_insert(0);
                *e = e.saturating_add(count);
            }
        }
    }
    let typed_sum: u64 = typed.values().fold(0u64, |a, b| a.saturating_add(*b));
    // Accounting strings give both the total and its breakdown: the total wins. A request
    // naming only types sums them.
    let total = match untyped {
        Some(u) if u >= typed_sum => u,
        Some(u) => u.saturating_add(typed_sum),
        None => typed_sum,
    };
    Ok(GpuCount {
        total,
        by_type: typed,
    })
}

/// `gres:gpu:h100:2` -> (`gres:gpu:h100`, Some("2")); `gres:gpu:h100` -> (same, None);
/// `gres/gpu:4` -> (`gres/gpu`, Some("4")).
fn split_request_count(entry: &str) -> (&str, Option<&str>) {
    match entry.rsplit_once(':') {
        Some((head, tail)) if tail.chars().next().is_some_and(|c| c.is_ascii_digit()) => {
            // `gres:gpu` alone splits into (`gres`, `gpu`): not a count.
            (head, Some(tail))
        }
        _ => (entry, None),
    }
}

/// Slurm counts may carry a unit suffix (k, m, g) in requests.
fn parse_count(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1_024),
        Some((i, 'm' | 'M')) => (&s[..i], 1_048_576),
        Some((i, 'g' | 'G')) => (&s[..i], 1_073_741_824),
        _ => (s, 1),
    };
    digits.parse::<u64>().ok().map(|n| n.saturating_mul(mult))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(s: &str) -> u64 {
        gpu_count(s).unwrap().total
    }

    #[test]
    fn request_forms() {
        assert_eq!(total("gres:gpu:8"), 8);
        assert_eq!(total("gres/gpu:6"), 6);
        assert_eq!(total("gres:gpu"), 1);
        assert_eq!(total("gres/gpu"), 1);
        assert_eq!(total("gres:gpu:h100:2"), 2);
        assert_eq!(gpu_count("gres/gpu:h100:2").unwrap().by_type["h100"], 2);
        assert_eq!(total("gres:gpu:a100:1,gres:gpu:h100:2"), 3);
        assert_eq!(total("gres:shard:2;gres:gpu:3;license/matlab:1"), 3);
        assert_eq!(total(""), 0);
        assert_eq!(total("gres:gpumem:40G"), 0);
    }

    #[test]
    fn accounting_forms() {
        assert_eq!(total("billing=1,cpu=1,gres/gpu=2,node=1"), 2);
        let c = gpu_count("cpu=2,gres/gpu=3,gres/gpu:h100=2,gres/gpu:a100=1,node=1").unwrap();
        assert_eq!(c.total, 3);
        assert_eq!(c.by_type["h100"], 2);
        assert_eq!(total("billing=1,cpu=1,mem=1M,node=1"), 0);
    }

    #[test]
    fn malformed_counts_are_errors() {
        assert!(gpu_count("gres/gpu=two").is_err());
        assert!(gpu_count("gres:gpu:h100:x:2").is_err());
        let e = gpu_count("billing=1,gres/gpu=-1").unwrap_err();
        assert_eq!(e.entry, "gres/gpu=-1");
    }

    #[test]
    fn multiplying() {
        let c = gpu_count("gres:gpu:h100:2").unwrap().times(3);
        assert_eq!(c.total, 6);
        assert_eq!(c.by_type["h100"], 6);
    }
}
