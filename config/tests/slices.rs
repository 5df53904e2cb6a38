//! GPU types that are slices of another type's GPU (issue 30): `slices_of` and `gpus`, the
//! rate a slice costs, and what the file may not say of them.

use teamshare_config::{parse, Config, ConfigError, Diagnostic, Slice};

const HEAD: &str = "[cluster]\nname = \"c\"\n\n[gpu_types.a100]\nrate_per_hour = 2.8\n\n";

/// A team, which every file needs; after the `[gpu_types]` sections.
const TEAM: &str = "\n[[team]]\nname = \"t\"\nquota = 0\n";

fn valid(source: &str) -> Config {
    parse(source, "teamshare.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn problems(source: &str) -> Vec<Diagnostic> {
    let source = if source.contains("[[team]]") {
        source.to_owned()
    } else {
        format!("{source}{TEAM}")
    };
    match parse(&source, "teamshare.toml") {
        Ok(config) => panic!("expected an invalid file, got {config:#?}"),
        Err(ConfigError::Invalid(diagnostics)) => diagnostics.0,
        Err(error) => panic!("expected diagnostics, got {error}"),
    }
}

fn one_problem(source: &str) -> Diagnostic {
    let mut p = problems(source);
    assert_eq!(p.len(), 1, "expected one problem, got {p:#?}");
    p.remove(0)
}

#[test]
fn a_slice_is_a_part_of_its_gpu_and_costs_that_part_unless_priced() {
    let c = valid(&format!(
        "{HEAD}[gpu_types.\"1g.10gb\"]\nslices_of = \"a100\"\ngpus = \"1/7\"\n\n\
         [gpu_types.\"3g.40gb\"]\nslices_of = \"a100\"\ngpus = 0.428571\nrate_per_hour = 1.5\n\n\
         [[team]]\nname = \"inference\"\nquota = {{ \"1g.10gb\" = 7 }}\n"
    ));
    let one = &c.gpu_types["1g.10gb"];
    assert_eq!(
        one.slice,
        Some(Slice {
            of: "a100".into(),
            numerator: 1,
            denominator: 7
        })
    );
    assert!(
        (one.rate_per_hour - 0.4).abs() < 1e-12,
        "{}",
        one.rate_per_hour
    );
    let three = &c.gpu_types["3g.40gb"];
    assert_eq!(
        three.slice.as_ref().map(|s| (s.numerator, s.denominator)),
        Some((3, 7))
    );
    assert_eq!(three.rate_per_hour, 1.5);
    assert!((c.gpu_equivalents("3g.40gb") - 3.0 / 7.0).abs() < 1e-12);
    assert_eq!(c.gpu_equivalents("a100"), 1.0);
    assert_eq!(c.gpu_equivalents("default"), 1.0);
    assert!(c.has_slices());
    assert_eq!(c.gpu_types["a100"].slice, None);
    // Per-type quotas of slices are governed as any type's.
    assert!(c.is_typed());
    assert_eq!(c.teams[0].quota_of("1g.10gb"), 7);
}

#[test]
fn slices_of_and_gpus_go_together() {
    let p = one_problem(&format!("{HEAD}[gpu_types.s]\nslices_of = \"a100\"\n"));
    assert!(p.message.contains("needs `gpus`"), "{p}");
    let p = one_problem(&format!("{HEAD}[gpu_types.s]\ngpus = \"1/2\"\n"));
    assert!(p.message.contains("needs `slices_of`"), "{p}");
    // A whole type still needs its rate.
    let p = one_problem(&format!("{HEAD}[gpu_types.h100]\n"));
    assert!(p.message.contains("missing `rate_per_hour`"), "{p}");
}

#[test]
fn a_slice_is_cut_from_a_declared_whole_gpu() {
    for (of, says) in [
        ("a10", "not declared"),
        ("s", "of itself"),
        ("default", "typed GPU"),
        ("t", "is itself a slice"),
    ] {
        let p = one_problem(&format!(
            "{HEAD}[gpu_types.default]\nrate_per_hour = 1\n\n\
             [gpu_types.t]\nslices_of = \"a100\"\ngpus = \"1/2\"\n\n\
             [gpu_types.s]\nslices_of = \"{of}\"\ngpus = \"1/2\"\n"
        ));
        assert!(p.message.contains(says), "{of}: {p}");
        assert_eq!(p.line, 15, "{of}: at the second `slices_of`: {p}");
    }
    let p = one_problem(&format!(
        "{HEAD}[gpu_types.s]\nslices_of = \"a10\"\ngpus = \"1/2\"\n"
    ));
    assert!(
        p.hint
            .as_deref()
            .unwrap_or("")
            .contains("did you mean `a100`?"),
        "{p}"
    );
}

#[test]
fn a_slice_has_a_size_above_0_and_at_most_one_gpu() {
    for size in [
        "0",
        "\"0/7\"",
        "\"8/7\"",
        "1.5",
        "-0.5",
        "\"1/0\"",
        "\"1/300\"",
        "0.333",
        "\"x\"",
        "true",
    ] {
        let p = one_problem(&format!(
            "{HEAD}[gpu_types.s]\nslices_of = \"a100\"\ngpus = {size}\n"
        ));
        assert!(p.message.contains("`gpus` in [gpu_types.s]"), "{size}: {p}");
    }
    let c = valid(&format!(
        "{HEAD}[gpu_types.s]\nslices_of = \"a100\"\ngpus = 1\n{TEAM}"
    ));
    assert_eq!(c.gpu_equivalents("s"), 1.0);
}

const FAMILY: &str = "[gpu_types.x]\nrate_per_hour = 1\n\n[gpu_types.\"1g.10gb\"]\nslices_of = \"a100\"\ngpus = \"1/7\"\n\n[gpu_types.\"3g.40gb\"]\nslices_of = \"a100\"\ngpus = \"3/7\"\n\n";

/// A quota, borrow table or lend table naming a type with slices counts the family (the
/// whole A100s and their slices) in GPU-equivalents: units of 1/7 here.
#[test]
fn a_sliced_type_in_a_team_figure_counts_its_family() {
    let c = valid(&format!(
        "{HEAD}{FAMILY}[[team]]\nname = \"t\"\nquota = {{ a100 = 2 }}\nborrow_limit = {{ a100 = 1 }}\nlend_limit = {{ a100 = 1 }}\n"
    ));
    let m = c.family_of("3g.40gb").expect("a member");
    assert_eq!((m.whole, m.units, m.per_gpu), ("a100", 3, 7));
    assert_eq!(c.family_of("a100").map(|m| m.units), Some(7));
    assert_eq!(c.family_of("x"), None);
    assert_eq!(
        c.family_members("a100"),
        vec![("a100", 7), ("1g.10gb", 1), ("3g.40gb", 3)]
    );
    assert_eq!(c.governed_families(), vec!["a100"]);
    let t = &c.teams[0];
    assert!(c.counts_family(t, "1g.10gb") && !c.counts_family(t, "x"));
    assert_eq!(t.family_quota_units(&m), 14);
    assert_eq!(t.family_borrow_units(&m), Some(7));
    assert_eq!(t.family_lend_units(&m), 7);
    // Slices counted one by one (by a team naming them) are not the family.
    let c = valid(&format!(
        "{HEAD}{FAMILY}[[team]]\nname = \"t\"\nquota = {{ \"1g.10gb\" = 3 }}\n"
    ));
    assert!(c.governed_families().is_empty());
    assert!(!c.counts_family(&c.teams[0], "1g.10gb"));
}

/// A family team names the family, not also its slices; its borrow and lend limits say per
/// type how much of the family they mean, since a number counts a slice as one GPU.
#[test]
fn a_family_team_names_neither_its_slices_nor_numbers() {
    for (field, says) in [
        ("quota = { a100 = 1, \"1g.10gb\" = 2 }", "names both `a100`"),
        (
            "quota = { a100 = 1 }\nborrow_limit = { \"3g.40gb\" = 1 }",
            "its slice `3g.40gb`",
        ),
        ("quota = { a100 = 1 }\nborrow_limit = 2", "borrow_limit"),
        (
            "quota = { a100 = 1 }\nborrow_limit = \"50%\"",
            "borrow_limit",
        ),
        ("quota = { a100 = 1 }\nlend_limit = 1", "lend_limit"),
    ] {
        let p = one_problem(&format!("{HEAD}{FAMILY}[[team]]\nname = \"t\"\n{field}\n"));
        assert!(p.message.contains(says), "{field}: {p}");
    }
    // Lending all or nothing needs no count.
    for lend in ["lend = true", "lend = false"] {
        valid(&format!(
            "{HEAD}{FAMILY}[[team]]\nname = \"t\"\nquota = {{ a100 = 1 }}\n{lend}\n"
        ));
    }
}

/// Rule 1 for a family: its teams' quotas (the family's and its slice types', each at its
/// size) against the family's GPUs, each at its size.
#[test]
fn a_family_quota_is_checked_against_the_family_capacity() {
    use std::collections::BTreeMap;
    let c = valid(&format!(
        "{HEAD}{FAMILY}[[team]]\nname = \"a\"\nquota = {{ a100 = 1 }}\n\n[[team]]\nname = \"b\"\nquota = {{ \"1g.10gb\" = 3 }}\n"
    ));
    // One A100 cut into 7 slices: 1 GPU of capacity, 10/7 of quotas.
    let cut: BTreeMap<String, u32> = [("1g.10gb".to_string(), 7)].into();
    let d = c.check_capacity(7, &cut);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert!(
        d[0].message.contains("(1 3/7 GPU-equivalents)") && d[0].message.contains("capacity (1)"),
        "{}",
        d[0]
    );
    assert!(d[0].message.contains("team `b`"), "{}", d[0]);
    // A second, whole A100 makes room: no whole A100 is needed for a family quota.
    let more: BTreeMap<String, u32> = [("1g.10gb".to_string(), 7), ("a100".to_string(), 1)].into();
    assert!(c.check_capacity(8, &more).is_empty());
    assert_eq!(teamshare_config::format_equivalents(3, 7), "3/7");
}

const SHARDS: &str = "[gpu_types.shard]\nslices_of = \"a100\"\ngpus = \"1/4\"\n\n";

/// `[gpu_types.shard]` governs Slurm's gres/shard: a quarter of an A100 in its family, priced
/// at that part of its rate, and left out of the family's capacity (a shard is a share of
/// GPUs counted already).
#[test]
fn shards_are_members_of_their_gpus_family_without_capacity_of_their_own() {
    use std::collections::BTreeMap;
    let c = valid(&format!(
        "{HEAD}{SHARDS}[[team]]\nname = \"a\"\nquota = {{ a100 = 1 }}\n\n[[team]]\nname = \"b\"\nquota = {{ a100 = 1 }}\n"
    ));
    let shard = c.shares().expect("shards governed");
    assert_eq!(
        (shard.of.as_str(), shard.numerator, shard.denominator),
        ("a100", 1, 4)
    );
    assert!((c.gpu_types["shard"].rate_per_hour - 0.7).abs() < 1e-9);
    let m = c.family_of("shard").expect("in the a100 family");
    assert_eq!((m.whole, m.units, m.per_gpu), ("a100", 1, 4));
    // Two A100s offered as 8 shards hold two A100s' worth of quota, not four.
    let two: BTreeMap<String, u32> = [("a100".to_string(), 2), ("shard".to_string(), 8)].into();
    assert!(c.check_capacity(2, &two).is_empty());
    let one: BTreeMap<String, u32> = [("a100".to_string(), 1), ("shard".to_string(), 4)].into();
    let d = c.check_capacity(1, &one);
    assert!(
        d.iter()
            .any(|d| d.message.contains("a100 family capacity (1)")),
        "{d:#?}"
    );
    // Without the section, shards are not governed (and refused at submit).
    assert!(valid(&format!("{HEAD}{TEAM}")).shares().is_none());
}

#[test]
fn a_shard_type_is_one_equal_share_of_a_gpu_without_a_rate() {
    for (section, says) in [
        (
            "[gpu_types.shard]\nslices_of = \"a100\"\ngpus = \"3/4\"\n",
            "not 3/4",
        ),
        (
            "[gpu_types.shard]\nslices_of = \"a100\"\ngpus = \"1/4\"\nrate_per_hour = 1\n",
            "no rate of its own",
        ),
        ("[gpu_types.shard]\n", "stands for Slurm's gres/shard"),
    ] {
        let d = one_problem(&format!("{HEAD}{section}"));
        assert!(d.message.contains(says), "{section}: {d}");
        assert!(
            d.hint
                .as_deref()
                .is_some_and(|h| h.contains("gpus = \"1/4\"")),
            "{d}"
        );
    }
}
