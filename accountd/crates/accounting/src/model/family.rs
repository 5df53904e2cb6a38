//! GPU families in the split (issue 30, docs/design/fractional-gpus.md): where a team's quota
//! counts a whole GPU type and its slices in GPU-equivalents, the family is split as one pool,
//! in units of 1/D of a GPU: each run's GPUs times its type's worth in units, each quota and
//! lend limit in units, the capacity of every member type at its worth.

use teamshare_config::Config;

use super::usage::TeamQuota;

/// One family as the split sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyQuotas {
    /// The whole type (`a100`).
    pub whole: String,
    /// What one whole GPU is worth in units (D).
    pub per_gpu: u32,
    /// Every member type with its worth in units: the whole type first, then its slices.
    pub members: Vec<(String, u32)>,
    /// Every configured team with its quota and lend limit in the family, in units, in file
    /// order: the family's for a team that counts it, its member types' at their worth for a
    /// team that names them one by one.
    pub teams: Vec<TeamQuota>,
}

impl FamilyQuotas {
    /// The families some team counts in GPU-equivalents; empty where none does.
    pub fn all_from_config(config: &Config) -> Vec<FamilyQuotas> {
        config
            .governed_families()
            .into_iter()
            .filter_map(|whole| {
                let m = config.family_of(whole)?;
                let members: Vec<(String, u32)> = config
                    .family_members(whole)
                    .into_iter()
                    .map(|(k, u)| (k.to_string(), u))
                    .collect();
                let teams = config
                    .teams
                    .iter()
                    .map(|t| {
                        let (quota, lend) = if config.counts_family(t, whole) {
                            (t.family_quota_units(&m), t.family_lend_units(&m))
                        } else {
                            members.iter().fold((0u64, 0u64), |(q, l), (k, u)| {
                                (
                                    q + u64::from(t.quota_of(k)) * u64::from(*u),
                                    l + u64::from(t.lend_limit_of(k)) * u64::from(*u),
                                )
                            })
                        };
                        TeamQuota {
                            name: t.name.clone(),
                            quota: u32::try_from(quota).unwrap_or(u32::MAX),
                            lend_limit: u32::try_from(lend).unwrap_or(u32::MAX),
                        }
                    })
                    .collect();
                Some(FamilyQuotas {
                    whole: whole.to_string(),
                    per_gpu: m.per_gpu,
                    members,
                    teams,
                })
            })
            .collect()
    }

    /// A member type's worth in units; `None` for a type not in the family.
    pub fn units_of(&self, gpu_type: &str) -> Option<u32> {
        self.members
            .iter()
            .find(|(k, _)| k == gpu_type)
            .map(|(_, u)| *u)
    }
}
