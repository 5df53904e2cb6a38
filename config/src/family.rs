//! GPU families (issue 30, docs/design/fractional-gpus.md): a whole GPU type with slices
//! (`slices_of`) and those slices. A quota, borrow limit or lend limit naming the whole type
//! counts the family in GPU-equivalents; the governor and the plugin count it in units of
//! 1/D of a GPU, where D is the least common multiple of the slices' denominators, so that
//! every figure stays an integer.

use std::collections::BTreeMap;

use crate::config::{Config, Team};
use crate::diagnostic::Diagnostic;

/// Where a GPU type sits in its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member<'c> {
    /// The family's whole type (`a100`).
    pub whole: &'c str,
    /// What one GPU of the member type is worth, in units.
    pub units: u32,
    /// What one whole GPU of the family is worth, in units (D).
    pub per_gpu: u32,
}

const fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Config {
    /// D for a whole type with slices: the least common multiple of their denominators;
    /// `None` for a type nothing is a slice of (or a slice itself).
    pub fn family_units(&self, whole: &str) -> Option<u32> {
        let mut lcm: Option<u32> = None;
        for t in self.gpu_types.values() {
            if let Some(s) = t.slice.as_ref().filter(|s| s.of == whole) {
                let l = lcm.unwrap_or(1);
                lcm = Some(l / gcd(l, s.denominator) * s.denominator);
            }
        }
        lcm
    }

    /// The family of `gpu_type`: its whole type, its worth and the whole GPU's, in units;
    /// `None` for a type without slices and not a slice.
    pub fn family_of<'c>(&'c self, gpu_type: &'c str) -> Option<Member<'c>> {
        // Cheap where nothing is sliced (the plugin asks on every typed submission): no
        // lookup by name.
        if !self.has_slices() {
            return None;
        }
        let (whole, slice) = match self.gpu_types.get(gpu_type)?.slice.as_ref() {
            Some(s) => (s.of.as_str(), Some(s)),
            None => (gpu_type, None),
        };
        let per_gpu = self.family_units(whole)?;
        let units = slice.map_or(per_gpu, |s| s.numerator * (per_gpu / s.denominator));
        Some(Member {
            whole,
            units,
            per_gpu,
        })
    }

    /// The types of family `whole`, each with its worth in units: the whole type first, then
    /// its slices in name order. Empty for a type without slices.
    pub fn family_members<'c>(&'c self, whole: &'c str) -> Vec<(&'c str, u32)> {
        let Some(per_gpu) = self.family_units(whole) else {
            return Vec::new();
        };
        let mut members = vec![(whole, per_gpu)];
        members.extend(self.gpu_types.iter().filter_map(|(name, t)| {
            let s = t.slice.as_ref().filter(|s| s.of == whole)?;
            Some((name.as_str(), s.numerator * (per_gpu / s.denominator)))
        }));
        members
    }

    /// The whole types with slices some team's quota, borrow limit or lend limit names: each
    /// such figure counts the family in GPU-equivalents.
    pub fn governed_families(&self) -> Vec<&str> {
        self.governed_types()
            .into_iter()
            .filter(|k| self.teams.iter().any(|t| names_type(t, k)))
            .filter(|k| self.family_units(k).is_some())
            .collect()
    }

    /// Whether `team`'s figures count `gpu_type`'s family in GPU-equivalents: the type is in
    /// a family whose whole type the team's quota, borrow limit or lend limit names.
    pub fn counts_family(&self, team: &Team, gpu_type: &str) -> bool {
        self.family_of(gpu_type)
            .is_some_and(|m| names_type(team, m.whole))
    }
}

/// Whether a team's quota, borrow table or lend table names `gpu_type`.
pub fn names_type(team: &Team, gpu_type: &str) -> bool {
    team.quota.by_type.contains_key(gpu_type)
        || [&team.borrow_by_type, &team.lend_by_type]
            .into_iter()
            .flatten()
            .any(|m| m.contains_key(gpu_type))
}

impl Team {
    /// The team's quota of family `m`, in units.
    pub fn family_quota_units(&self, m: &Member<'_>) -> u64 {
        u64::from(self.quota_of(m.whole)) * u64::from(m.per_gpu)
    }

    /// The team's borrow limit in family `m`, in units; `None` without one (a family team
    /// gives its borrow limit per type or none).
    pub fn family_borrow_units(&self, m: &Member<'_>) -> Option<u64> {
        self.borrow_limit_for(m.whole)
            .map(|b| u64::from(b) * u64::from(m.per_gpu))
    }

    /// The team's lend limit in family `m`, in units: its table's entry, else the whole
    /// family quota when it lends everything, else nothing.
    pub fn family_lend_units(&self, m: &Member<'_>) -> u64 {
        let lent = match &self.lend_by_type {
            Some(t) => t.get(m.whole).copied().unwrap_or(0),
            None if self.lend_limit >= self.quota.total => self.quota_of(m.whole),
            None => 0,
        };
        u64::from(lent.min(self.quota_of(m.whole))) * u64::from(m.per_gpu)
    }
}

impl Config {
    /// The check of rule 1 for family `whole`: the teams' quotas in it (the family's, in
    /// GPU-equivalents, and those of its slice types each on its own) against the family's
    /// capacity, all in units.
    pub(crate) fn over_family_capacity(
        &self,
        whole: &str,
        capacity_by_type: &BTreeMap<String, u32>,
        partitions: &str,
    ) -> Option<Diagnostic> {
        let members = self.family_members(whole);
        let per_gpu = self.family_units(whole)?;
        // Shards are shares of the whole type's GPUs, counted there already.
        let capacity: u64 = members
            .iter()
            .filter(|(k, _)| *k != crate::config::SHARE_TYPE)
            .map(|(k, u)| u64::from(capacity_by_type.get(*k).copied().unwrap_or(0)) * u64::from(*u))
            .sum();
        let quotas: Vec<(&Team, u64)> = self
            .teams
            .iter()
            .map(|t| {
                let own = members.iter().fold(0u64, |s, (k, u)| {
                    s + u64::from(t.quota.by_type.get(*k).copied().unwrap_or(0)) * u64::from(*u)
                });
                (t, own)
            })
            .filter(|(_, q)| *q > 0)
            .collect();
        let sum: u64 = quotas.iter().map(|(_, q)| q).sum();
        if sum <= capacity {
            return None;
        }
        let mut running = 0u64;
        let (culprit, _) = quotas.iter().find(|(_, q)| {
            running += q;
            running > capacity
        })?;
        let eq = |units: u64| format_equivalents(units, per_gpu);
        let listed = quotas
            .iter()
            .map(|(t, q)| format!("{} {}", t.name, eq(*q)))
            .collect::<Vec<_>>()
            .join(", ");
        let types = members
            .iter()
            .map(|(k, _)| *k)
            .collect::<Vec<_>>()
            .join(", ");
        Some(
            Diagnostic::new(
                &culprit.location,
                format!(
                    "the sum of {whole} family quotas ({} GPU-equivalents) is above the governed {whole} family capacity ({}); team `{}` brings it over",
                    eq(sum),
                    eq(capacity),
                    culprit.name
                ),
            )
            .with_hint(format!(
                "{whole} family quotas in GPU-equivalents: {listed}; the capacity counts the {types} GPUs of usable nodes in partitions {partitions}, each at its size: lower a quota or bring nodes back"
            )),
        )
    }
}

/// `units` of 1/`per_gpu` of a GPU, as GPU-equivalents: `3`, or `3 3/7` where not whole.
pub fn format_equivalents(units: u64, per_gpu: u32) -> String {
    let per = u64::from(per_gpu.max(1));
    let (whole, rest) = (units / per, units % per);
    match (whole, rest) {
        (w, 0) => w.to_string(),
        (0, r) => format!("{r}/{per}"),
        (w, r) => format!("{w} {r}/{per}"),
    }
}
