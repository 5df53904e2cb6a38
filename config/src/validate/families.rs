//! A team's figures naming a GPU family (a whole type with slices): they count the family in
//! GPU-equivalents (docs/design/fractional-gpus.md), so they cannot also name its slices, and
//! the borrow and lend limits say per type how much of the family they mean.

use std::collections::BTreeMap;

use crate::config::{GpuType, Quota};

use super::reader::{Checker, Section};

/// The whole types with slices among `names`, each with its slices named in a list.
fn families_named<'a>(
    gpu_types: &BTreeMap<String, GpuType>,
    names: impl Iterator<Item = &'a String>,
) -> Vec<(String, Vec<String>)> {
    let mut families: Vec<(String, Vec<String>)> = Vec::new();
    for name in names {
        let slices: Vec<String> = gpu_types
            .iter()
            .filter(|(_, t)| t.slice.as_ref().is_some_and(|s| &s.of == name))
            .map(|(n, _)| n.clone())
            .collect();
        if !slices.is_empty() && !families.iter().any(|(w, _)| w == name) {
            families.push((name.clone(), slices));
        }
    }
    families
}

impl Checker<'_> {
    /// The rules for a team whose quota, borrow table or lend table names a family.
    pub(super) fn family_figures(
        &mut self,
        section: &Section<'_>,
        quota: Option<&Quota>,
        tables: [Option<&BTreeMap<String, u32>>; 2],
        gpu_types: &BTreeMap<String, GpuType>,
    ) {
        let named: Vec<&String> = quota
            .map(|q| &q.by_type)
            .into_iter()
            .chain(tables.into_iter().flatten())
            .flat_map(BTreeMap::keys)
            .collect();
        let families = families_named(gpu_types, named.iter().copied());
        let Some((first, first_slices)) = families.first() else {
            return;
        };
        for (whole, slices) in &families {
            if let Some(slice) = slices.iter().find(|s| named.contains(s)) {
                self.error(
                    section.span.clone(),
                    format!(
                        "{} names both `{whole}`, which counts its family in GPU-equivalents, and its slice `{slice}`",
                        section.title
                    ),
                    format!("count the family as `{whole}` (e.g. {whole} = 1 is 1 GPU's worth of {whole} and {} in any mix), or name the slice types each on its own and leave `{whole}` out", slices.join(", ")),
                );
            }
        }
        for (key, form) in [
            ("borrow_limit", "borrow_limit"),
            ("lend_limit", "lend_limit"),
        ] {
            let Some(field) = section.field(key) else {
                continue;
            };
            if field.item.as_table_like().is_none() {
                self.error(
                    field.span(),
                    format!(
                        "{} is a number, but the team counts `{first}` in GPU-equivalents",
                        field.what()
                    ),
                    format!("a number counts GPUs of every type alike (a {} as one GPU); give it per type: {form} = {{ {first} = 1 }} (1 GPU's worth of the family)", first_slices[0]),
                );
            }
        }
    }
}
