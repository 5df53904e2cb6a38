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

/// The most GPUs one job may ask for, whatever the state says: 2^20.
///
/// Far above any real cluster (the largest have about 10^5 GPUs), far below where arithmetic on
/// counts saturates (a u32 holds 4096 times this), so every count the plugin multiplies, adds
/// and hands to the governor stays exact. A count beyond it is a typo or a probe (`gpu:1t` is
/// 2^40 GPUs to Slurm), refused at once even when the team has no borrow limit or the
/// governor's state is stale.
pub const MAX_GPUS_PER_JOB: u64 = 1 << 20;

/// Count the GPUs in a TRES/GRES string of any of the forms above.
///
/// A missing count (`gres:gpu`) means one GPU, as Slurm reads it. Untyped and typed entries are
/// combined the way Slurm means them: in accounting strings the typed entries are a breakdown of
/// the untyped total; in requests a typed entry is its own request.
///
/// Counts are read as Slurm 22.05 reads them (`_get_next_gres` and `suffix_mult` in
/// src/common/gres.c and slurm_protocol_defs.c), so the plugin never counts fewer GPUs than
/// Slurm will allocate: a unit suffix multiplies (`k`/`kib` 1024, `kb` 1000, up to `p`/`pb`), and
/// a count too large for 64 bits saturates (Slurm's own product wraps). Where Slurm would read
/// an odd spelling as a count (a sign, leading blanks, a bare suffix) the entry is an error
/// instead of a guess; so is text before `gres:` in an entry, which Slurm skips and reads the
/// rest of.
pub fn gpu_count(spec: &str) -> Result<GpuCount, GresError> {
    gres_count::<false>(spec)
}

/// The shards (`gres/shard`, issue 30) a TRES/GRES string names, in all: requests
/// (`gres:shard:2`, `gres/shard:a100:1`), accounting (`gres/shard=3`) and a node's gres
/// (`gres:shard:a100:16`), read as [`gpu_count`] reads GPUs. Slurm counts shards untyped in
/// its TRES (`gres/shard=16`), so the type a request names is left out.
pub fn shard_count(spec: &str) -> Result<u64, GresError> {
    // Nearly every string names no shard: one pass over the bytes decides.
    if !spec.as_bytes().windows(5).any(|w| w == b"shard") {
        return Ok(0);
    }
    gres_count::<true>(spec).map(|c| c.total)
}

/// The count of GPUs, or of shards (`SHARDS`), in a TRES/GRES string: see [`gpu_count`]. The
/// name is a constant of each instance, so the submit path's GPU count compares against a
/// literal as before shards were read.
fn gres_count<const SHARDS: bool>(spec: &str) -> Result<GpuCount, GresError> {
    let gres = if SHARDS { "shard" } else { "gpu" };
    let mut untyped: Option<u64> = None;
    let mut typed: BTreeMap<String, u64> = BTreeMap::new();
    let mut accounting = false;
    for raw in spec.split([',', ';']) {
        let entry = raw.trim();
        if entry.is_empty() {
            continue;
        }
        let err = |reason: &'static str| GresError {
            entry: entry.to_string(),
            reason,
        };
        // Slurm looks for `gres:` anywhere in the rest of the string and ignores what precedes
        // it: `xgres:gpu:8` is 8 GPUs to Slurm.
        if !entry.starts_with("gres:") && !entry.starts_with("gres/") && entry.contains("gres:") {
            return Err(err("text before `gres:`"));
        }
        // Accounting form `name=count`, request form `name:count` (or no count).
        let (name, count) = match entry.split_once('=') {
            Some((name, count)) => {
                accounting = true;
                (name, Some(count))
            }
            None => split_request_count(entry),
        };
        let rest = match name
            .strip_prefix("gres/")
            .or_else(|| name.strip_prefix("gres:"))
            .and_then(|r| r.strip_prefix(gres))
        {
            Some(r) => r,
            None => continue,
        };
        let gpu_type = match rest {
            "" => None,
            r => match r.strip_prefix(':') {
                Some(t) if !t.is_empty() && !t.contains(':') => Some(t),
                // `gres/gpumem`, `gres:gpu_x`: another GRES whose name starts with gpu.
                None => continue,
                _ => return Err(err("malformed GPU type")),
            },
        };
        let count = match count {
            None => 1,
            Some(c) => parse_count(c).map_err(err)?,
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
    // Accounting strings (`name=count`) give both the total and its breakdown: the total wins.
    // In a request every entry is its own request (`gres:gpu:4,gres:gpu:h100:2` is 6 GPUs to
    // Slurm), so they add up.
    let total = match untyped {
        Some(u) if accounting && u >= typed_sum => u,
        Some(u) => u.saturating_add(typed_sum),
        None => typed_sum,
    };
    Ok(GpuCount {
        total,
        by_type: typed,
    })
}

/// The GRES that share a GPU between jobs (`shard`, `mps`) a TRES/GRES string asks for, in
/// either request form (`gres:shard:2`, `gres/shard:a100:1`, `gres/mps:50`): the first such
/// name with a count other than 0 (a missing count is 1, as for GPUs), or `None`.
///
/// Slurm counts them apart from `gres/gpu` (a job with `shard:2` holds `gres/shard=2` and no
/// `gres/gpu`), so [`gpu_count`] leaves them out; teamshare's quotas are in GPUs, and a share
/// counted as nothing would run beside every limit (docs/design/fractional-gpus.md).
pub fn gpu_share(spec: &str) -> Option<&'static str> {
    gpu_share_but(spec, None)
}

/// [`gpu_share`], passing over `skip` (`shard` where the configuration governs shards): the
/// first other share asked for, wherever it stands in the string.
pub fn gpu_share_but(spec: &str, skip: Option<&str>) -> Option<&'static str> {
    // Nearly every request names neither: one pass over the bytes decides (the submit path;
    // a substring search per name cost more than the rest of the check).
    if !spec
        .as_bytes()
        .windows(3)
        .any(|w| w == b"mps" || w == b"har")
    {
        return None;
    }
    for raw in spec.split([',', ';']) {
        let entry = raw.trim();
        let Some(rest) = entry
            .strip_prefix("gres:")
            .or_else(|| entry.strip_prefix("gres/"))
        else {
            continue;
        };
        let (name, count) = match rest.split_once('=') {
            Some((name, count)) => (name, Some(count)),
            None => {
                let (_, count) = split_request_count(entry);
                (rest.split(':').next().unwrap_or(rest), count)
            }
        };
        let name = name.split(':').next().unwrap_or(name);
        let share = match name {
            "shard" => "shard",
            "mps" => "mps",
            _ => continue,
        };
        // An unreadable count is a request all the same.
        if Some(share) != skip && count.is_none_or(|c| parse_count(c) != Ok(0)) {
            return Some(share);
        }
    }
    None
}

/// `gres:gpu:h100:2` -> (`gres:gpu:h100`, Some("2")); `gres:gpu:h100` -> (same, None);
/// `gres/gpu:4` -> (`gres/gpu`, Some("4")).
///
/// The last field is a count exactly when Slurm would take it for one (`_is_valid_number`:
/// strtoull, then a suffix `suffix_mult` knows), so `gpu:1g.5gb` stays a (MIG) type while
/// `gpu:+2`, `gpu: 2` and `gpu:k` are counts, which [`parse_count`] then refuses to guess at.
fn split_request_count(entry: &str) -> (&str, Option<&str>) {
    match entry.rsplit_once(':') {
        // `gres:gpu` alone splits into (`gres`, `gpu`): not a count.
        Some((head, tail)) if head.contains(':') || head.contains('/') => {
            if slurm_reads_as_count(tail) {
                (head, Some(tail))
            } else {
                (entry, None)
            }
        }
        _ => (entry, None),
    }
}

/// Whether Slurm's `_is_valid_number` accepts `s`: optional C blanks, an optional sign, digits
/// (none is allowed: strtoull then reads 0 and leaves the whole text as the suffix), a suffix
/// `suffix_mult` knows, and no overflow of the digits.
fn slurm_reads_as_count(s: &str) -> bool {
    let body = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let unsigned = body.strip_prefix(['+', '-']).unwrap_or(body);
    let digits_end = unsigned
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(unsigned.len());
    let (digits, suffix) = unsigned.split_at(digits_end);
    if digits.is_empty() {
        // No digits: strtoull consumed nothing, so the suffix is the whole text.
        return suffix_multiplier(s).is_some();
    }
    // strtoull returns ULLONG_MAX on overflow (and for `-1`), which Slurm treats as no number.
    let value = match digits.parse::<u64>() {
        Ok(v) if body.starts_with('-') => v.wrapping_neg(),
        Ok(v) => v,
        Err(_) => return false,
    };
    value != u64::MAX && suffix_multiplier(suffix).is_some()
}

/// Slurm's `suffix_mult`: the multiplier of a count's unit suffix, case-insensitive; `None`
/// for a suffix Slurm does not know.
fn suffix_multiplier(suffix: &str) -> Option<u64> {
    const K: u64 = 1024;
    const KB: u64 = 1000;
    let s = suffix.to_ascii_lowercase();
    Some(match s.as_str() {
        "" => 1,
        "k" | "kib" => K,
        "kb" => KB,
        "m" | "mib" => K.pow(2),
        "mb" => KB.pow(2),
        "g" | "gib" => K.pow(3),
        "gb" => KB.pow(3),
        "t" | "tib" => K.pow(4),
        "tb" => KB.pow(4),
        "p" | "pib" => K.pow(5),
        "pb" => KB.pow(5),
        _ => return None,
    })
}

/// A count as Slurm reads it: decimal digits and an optional unit suffix ([`suffix_multiplier`]).
/// Too many digits or a product beyond 64 bits saturates to `u64::MAX` (refused later as
/// absurd; Slurm's own product wraps). A sign, blanks or a suffix without digits are errors:
/// Slurm reads them, but nobody writes them on purpose.
fn parse_count(s: &str) -> Result<u64, &'static str> {
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, suffix) = s.split_at(digits_end);
    if digits.is_empty() {
        return Err("count must be digits with an optional k/m/g/t/p suffix");
    }
    let mult =
        suffix_multiplier(suffix).ok_or("unknown count suffix (Slurm reads k, m, g, t, p)")?;
    let n = digits.parse::<u64>().unwrap_or(u64::MAX);
    Ok(n.saturating_mul(mult))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(s: &str) -> u64 {
        gpu_count(s).unwrap().total
    }

    /// Issue 30: shards counted in every form, apart from GPUs; typed or not, one count.
    #[test]
    fn shards_are_counted_apart_from_gpus() {
        for (spec, n) in [
            ("gres:shard:2", 2),
            ("gres/shard:a100:3", 3),
            ("gres:shard", 1),
            ("billing=1,cpu=1,gres/shard=3,node=1", 3),
            ("gres:gpu:a100:4,gres:shard:a100:16", 16),
            ("gres/shard:1,gres/shard:a100:2", 3),
            ("gres/gpu:2", 0),
            ("gres/shardx:1", 0),
            ("gres/shard:0", 0),
            ("", 0),
        ] {
            assert_eq!(shard_count(spec), Ok(n), "{spec}");
        }
        assert_eq!(total("gres:gpu:a100:4,gres:shard:a100:16"), 4);
        assert!(shard_count("gres/shard=x").is_err());
    }

    #[test]
    fn gpu_shares_are_found_in_every_form() {
        for spec in [
            "gres:shard:2",
            "gres/shard:2",
            "gres/shard:a100:1",
            "gres:gpu:1,gres:shard",
            "gres/mps:50",
            "billing=1,gres/shard=3",
            "gres/shard:1k",
            "gres/shard:x",
        ] {
            assert!(gpu_share(spec).is_some(), "{spec}");
        }
        assert_eq!(gpu_share("gres/mps:a100:25"), Some("mps"));
        // Governed shards passed over, another share is still found behind them.
        assert_eq!(
            gpu_share_but("gres:shard:1,gres:mps:50", Some("shard")),
            Some("mps")
        );
        assert_eq!(gpu_share_but("gres:shard:1", Some("shard")), None);
        for spec in [
            "gres:gpu:2",
            "gres/gpu:1g.10gb:1",
            "gres/shardx:1",
            "license/shard:1",
            "gres/shard:0",
            "gres:shard:a100:0",
            "",
        ] {
            assert_eq!(gpu_share(spec), None, "{spec}");
        }
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
        // Untyped and typed requests are separate requests to Slurm.
        assert_eq!(total("gres:gpu:4,gres:gpu:h100:2"), 6);
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
    fn counts_carry_every_suffix_slurm_reads() {
        assert_eq!(total("gres:gpu:2k"), 2048);
        assert_eq!(total("gres:gpu:1K"), 1024);
        assert_eq!(total("gres:gpu:1kb"), 1000);
        assert_eq!(total("gres:gpu:1KiB"), 1024);
        assert_eq!(total("gres:gpu:1m"), 1 << 20);
        assert_eq!(total("gres:gpu:1g"), 1 << 30);
        assert_eq!(total("gres:gpu:1t"), 1 << 40);
        assert_eq!(total("gres/gpu:h100:1t"), 1 << 40);
        assert_eq!(total("gres:gpu:1p"), 1 << 50);
        assert_eq!(total("gres:gpu:3pb"), 3_000_000_000_000_000);
        // Beyond 64 bits: saturated, never wrapped to a small number.
        assert_eq!(total("gres:gpu:16777216t"), u64::MAX);
        // Digits beyond 64 bits: strtoull overflows, so Slurm reads a type with one GPU, or,
        // after a type, no valid count at all.
        assert_eq!(total("gres:gpu:99999999999999999999999"), 1);
        assert!(gpu_count("gres:gpu:h100:99999999999999999999999").is_err());
    }

    #[test]
    fn a_count_is_what_slurm_takes_for_one() {
        // MIG profiles are types, as Slurm reads them.
        let c = gpu_count("gres:gpu:1g.5gb").unwrap();
        assert_eq!((c.total, c.by_type["1g.5gb"]), (1, 1));
        assert_eq!(total("gres:gpu:1g.5gb:3"), 3);
        // Spellings Slurm reads as a count are refused rather than guessed at.
        for odd in [
            "gres:gpu:+2",
            "gres:gpu:-2",
            "gres:gpu:k",
            "gres:gpu:h100:-1",
        ] {
            assert!(gpu_count(odd).is_err(), "{odd}");
        }
        // Not a suffix Slurm knows: a type, as Slurm reads it.
        assert_eq!(gpu_count("gres:gpu:2x").unwrap().by_type["2x"], 1);
        // `-1` overflows strtoull: Slurm reads a type named `-1`, one GPU.
        assert_eq!(total("gres:gpu:-1"), 1);
        // Slurm skips text before `gres:`.
        assert!(gpu_count("xgres:gpu:5").is_err());
        assert!(gpu_count("license/x:1,cpu=2gres:gpu:5").is_err());
    }

    #[test]
    fn multiplying() {
        let c = gpu_count("gres:gpu:h100:2").unwrap().times(3);
        assert_eq!(c.total, 6);
        assert_eq!(c.by_type["h100"], 6);
    }
}
