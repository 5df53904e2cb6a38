//! Invalid files: each kind of problem at the right line:column, with a useful hint, and all of
//! them at once.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use teamshare_config::{parse, ConfigError, Diagnostic};

/// Every diagnostic for `source`, which must be invalid.
fn problems(source: &str) -> Vec<Diagnostic> {
    match parse(source, "teamshare.toml") {
        Ok(config) => panic!("expected an invalid file, got {config:#?}"),
        Err(ConfigError::Invalid(diagnostics)) => diagnostics.0,
        Err(error) => panic!("expected diagnostics, got {error}"),
    }
}

/// The one diagnostic for `source`.
fn only(source: &str) -> Diagnostic {
    let mut problems = problems(source);
    assert_eq!(problems.len(), 1, "expected one problem, got {problems:#?}");
    problems.remove(0)
}

/// 1-based line and column (in characters) of the `nth` (0-based) occurrence of `needle`.
fn position_nth(source: &str, needle: &str, nth: usize) -> (usize, usize) {
    let (offset, _) = source
        .match_indices(needle)
        .nth(nth)
        .unwrap_or_else(|| panic!("{needle:?} not in the source"));
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, source[line_start..offset].chars().count() + 1)
}

fn position(source: &str, needle: &str) -> (usize, usize) {
    position_nth(source, needle, 0)
}

fn place(problem: &Diagnostic) -> (usize, usize) {
    (problem.line, problem.column)
}

fn hint(problem: &Diagnostic) -> &str {
    problem.hint.as_deref().unwrap_or("")
}

const CLUSTER: &str = "[cluster]\nname = \"c\"\n";

fn with_team(team: &str) -> String {
    format!("{CLUSTER}\n[[team]]\n{team}")
}

#[test]
fn syntax_errors_are_one_diagnostic_at_the_parser_position() {
    let source = "[cluster]\nname = \"c\"\n\n[[team]]\nname = \n";
    let problem = only(source);
    assert_eq!(place(&problem), (5, 8));
    assert!(problem.message.starts_with("invalid TOML"), "{problem}");
    assert!(problem.hint.is_some());

    let duplicate_key = "[cluster]\nname = \"c\"\nname = \"d\"\n";
    assert_eq!(place(&only(duplicate_key)), (3, 1));
}

#[test]
fn unknown_fields_suggest_the_closest_key() {
    let source = with_team("name = \"a\"\n   quotaa = 2\n");
    // Reported once: `quota` is not also reported as missing.
    let problem = only(&source);
    assert_eq!(place(&problem), position(&source, "quotaa"));
    assert_eq!(problem.message, "unknown field `quotaa` in [[team]]");
    assert_eq!(hint(&problem), "did you mean `quota`?");
    assert_eq!(
        problem.to_string(),
        "teamshare.toml:6:4: error: unknown field `quotaa` in [[team]]\n  hint: did you mean `quota`?"
    );
}

#[test]
fn unknown_fields_far_from_any_key_list_the_expected_keys() {
    let source = with_team("name = \"a\"\nquota = 1\ncolour = \"red\"\n");
    let problem = only(&source);
    assert_eq!(place(&problem), position(&source, "colour"));
    assert_eq!(
        hint(&problem),
        "expected one of name, quota, borrow_limit, lend, lend_limit, weight"
    );
}

#[test]
fn unknown_fields_are_found_in_every_section() {
    let source = format!(
        "{}\n[gpu_types.h100]\nrate = 1\n[[priority_class]]\nname = \"p\"\npreemtible = false\n[governance]\nreclaim_grase = \"1m\"\n[accountd]\ndatabse = \"x.db\"\n",
        with_team("name = \"a\"\nquota = 1\n")
    );
    let problems = problems(&source);
    let found: Vec<((usize, usize), &str)> = problems.iter().map(|p| (place(p), hint(p))).collect();
    assert_eq!(
        found,
        [
            (position(&source, "rate"), "did you mean `rate_per_hour`?"),
            (
                position(&source, "preemtible"),
                "did you mean `preemptible`?"
            ),
            (
                position(&source, "reclaim_grase"),
                "did you mean `reclaim_grace`?"
            ),
            (position(&source, "databse"), "did you mean `database`?"),
        ]
    );
}

#[test]
fn unknown_sections_suggest_the_header() {
    let source = format!("{CLUSTER}[[teams]]\nname = \"a\"\nquota = 1\n[extra]\n");
    let problems = problems(&source);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert_eq!(place(&problems[0]), position(&source, "teams"));
    assert_eq!(problems[0].message, "unknown section `teams`");
    assert_eq!(hint(&problems[0]), "did you mean [[team]]?");
    assert_eq!(place(&problems[1]), position(&source, "extra"));
    assert!(
        hint(&problems[1]).starts_with("expected one of [cluster], [gpu_types.<type>], [[team]]")
    );
}

#[test]
fn wrong_value_types_say_what_was_expected() {
    let source = with_team("name = \"a\"\nquota = \"two\"\nweight = 1.5\nlend = \"yes\"\n");
    let problems = problems(&source);
    let found: Vec<((usize, usize), &str)> = problems
        .iter()
        .map(|p| (place(p), p.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                position(&source, "\"two\""),
                "`quota` in [[team]] must be a non-negative integer or a table of GPU type = count, not a string"
            ),
            (
                position(&source, "1.5"),
                "`weight` in [[team]] must be a non-negative integer, not a float"
            ),
            (
                position(&source, "\"yes\""),
                "`lend` in [[team]] must be true or false, not a string"
            ),
        ]
    );
    assert_eq!(hint(&problems[1]), "for example: weight = 40");
}

#[test]
fn negative_rates_are_refused() {
    // The type is still offered: the typed quota naming it is not a second problem.
    let source = format!(
        "{}[gpu_types.h100]\nrate_per_hour = -3.5\n",
        with_team("name = \"a\"\nquota = { h100 = 1 }\n")
    );
    let problem = only(&source);
    assert_eq!(place(&problem), position(&source, "-3.5"));
    assert!(
        problem.message.starts_with("negative rate -3.5"),
        "{problem}"
    );

    let infinite = format!(
        "{}[gpu_types.h100]\nrate_per_hour = inf\n",
        with_team("name = \"a\"\nquota = 1\n")
    );
    assert!(only(&infinite).message.contains("finite"));
}

#[test]
fn duplicate_teams_name_the_first_definition() {
    let source = format!(
        "{CLUSTER}\n[[team]]\nname = \"agents\"\nquota = 1\n\n[[team]]\nname = \"agents\"\nquota = 2\n"
    );
    let problem = only(&source);
    assert_eq!(place(&problem), position_nth(&source, "\"agents\"", 1));
    let first_line = position(&source, "[[team]]").0;
    assert_eq!(
        problem.message,
        format!("duplicate team `agents`: already defined at line {first_line}")
    );
}

#[test]
fn duplicate_priority_classes_are_refused() {
    let source = format!(
        "{}[[priority_class]]\nname = \"batch\"\n[[priority_class]]\nname = \"batch\"\n",
        with_team("name = \"a\"\nquota = 1\n")
    );
    let problem = only(&source);
    assert_eq!(place(&problem), position_nth(&source, "\"batch\"", 1));
    assert!(problem
        .message
        .starts_with("duplicate priority class `batch`"));
}

#[test]
fn typed_quotas_must_name_offered_gpu_types() {
    let source = format!(
        "{CLUSTER}[gpu_types.h100]\nrate_per_hour = 4\n[gpu_types.a100]\nrate_per_hour = 2\n[[team]]\nname = \"a\"\nquota = {{ h100 = 1, h10 = 2, l40s = 1 }}\n"
    );
    let problems = problems(&source);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert_eq!(place(&problems[0]), position(&source, "h10 ="));
    assert_eq!(
        problems[0].message,
        "GPU type `h10` in the quota of [[team]] is not offered"
    );
    assert!(hint(&problems[0]).starts_with("did you mean `h100`?"));
    assert_eq!(place(&problems[1]), position(&source, "l40s"));
    assert_eq!(
        hint(&problems[1]),
        "offered GPU types (from [gpu_types]): a100, h100"
    );

    let none_offered = with_team("name = \"a\"\nquota = { h100 = 1 }\n");
    assert!(hint(&only(&none_offered)).contains("[gpu_types.h100]"));
}

#[test]
fn lend_and_lend_limit_exclude_each_other() {
    let source = with_team("name = \"a\"\nquota = 2\nlend = true\nlend_limit = 1\n");
    let problem = only(&source);
    assert_eq!(place(&problem), position(&source, "lend_limit"));
    assert_eq!(problem.message, "both `lend` and `lend_limit` in [[team]]");
}

#[test]
fn lend_limit_is_at_most_the_quota() {
    let source = with_team("name = \"a\"\nquota = 2\nlend_limit = 3\n");
    let problem = only(&source);
    assert_eq!(place(&problem), position(&source, "3\n"));
    assert!(
        problem.message.contains("above the team's quota of 2"),
        "{problem}"
    );
}

#[test]
fn borrow_limits_are_counts_or_percentages() {
    for (value, needle) in [
        ("\"lots\"", "\"lots\""),
        ("\"50\"", "\"50\""),
        ("\"-10%\"", "\"-10%\""),
        ("-1", "-1"),
        ("true", "true"),
    ] {
        let source = with_team(&format!(
            "name = \"a\"\nquota = 2\nborrow_limit = {value}\n"
        ));
        let problem = only(&source);
        assert_eq!(place(&problem), position(&source, needle), "{value}");
        assert!(
            problem.message.starts_with("`borrow_limit` in [[team]]"),
            "{problem}"
        );
    }
}

#[test]
fn team_names_follow_slurm_account_rules() {
    let source = with_team("name = \"Agents\"\nquota = 1\n");
    let problem = only(&source);
    assert_eq!(place(&problem), position(&source, "\"Agents\""));
    assert_eq!(
        problem.message,
        "team name \"Agents\" is not a valid Slurm account name"
    );
    assert_eq!(
        hint(&problem),
        "Slurm account names are lowercase: did you mean \"agents\"?"
    );
    let long = "x".repeat(65);
    let source = with_team(&format!("name = \"{long}\"\nquota = 1\n"));
    assert!(only(&source).message.contains("longer than 64"));
}

#[test]
fn counts_must_fit() {
    let source = with_team("name = \"a\"\nquota = -2\nweight = 0\n");
    let problems = problems(&source);
    let found: Vec<((usize, usize), &str)> = problems
        .iter()
        .map(|p| (place(p), p.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                position(&source, "-2"),
                "`quota` in [[team]] must not be negative (got -2)"
            ),
            (
                position(&source, "0\n"),
                "`weight` in [[team]] must be at least 1"
            ),
        ]
    );
    let huge = with_team("name = \"a\"\nquota = 5000000000\n");
    assert!(only(&huge).message.contains("too large"));
}

#[test]
fn durations_and_choices_are_checked() {
    let source = format!(
        "{}[governance]\nreclaim_grace = \"5x\"\nstate_max_age = \"0s\"\nreclaim_mode = \"requeu\"\non_stale_state = \"open\"\nmin_runtime_before_reclaim = -5\n",
        with_team("name = \"a\"\nquota = 1\n")
    );
    let problems = problems(&source);
    let found: Vec<((usize, usize), &str)> = problems.iter().map(|p| (place(p), hint(p))).collect();
    let durations = "write a duration such as \"30s\", \"5m\", \"1h30m\" or \"7d\", or a whole number of seconds";
    assert_eq!(
        found,
        [
            (position(&source, "\"5x\""), durations),
            (position(&source, "\"0s\""), durations),
            (position(&source, "\"requeu\""), "did you mean \"requeue\"?"),
            (
                position(&source, "\"open\""),
                "expected one of \"fail-open\", \"fail-closed\""
            ),
            (position(&source, "-5"), durations),
        ]
    );
    assert!(
        problems[0].message.contains("unknown unit `x`"),
        "{}",
        problems[0]
    );
    assert!(
        problems[1].message.contains("longer than zero"),
        "{}",
        problems[1]
    );
    assert_eq!(
        problems[2].message,
        "unknown value \"requeu\" for `reclaim_mode` in [governance]"
    );
}

/// Issue 29: the idle window is a duration longer than zero; idle-first is true or false.
#[test]
fn idleness_settings_are_checked() {
    let source = format!(
        "{}[governance]\nidle_window = \"0s\"\nidle_first_reclaim = \"yes\"\n",
        with_team("name = \"a\"\nquota = 1\n")
    );
    let problems = problems(&source);
    let found: Vec<(usize, usize)> = problems.iter().map(place).collect();
    assert_eq!(
        found,
        [position(&source, "\"0s\""), position(&source, "\"yes\"")]
    );
    assert!(
        problems[0].message.contains("longer than zero"),
        "{}",
        problems[0]
    );
    let typo = with_team("name = \"a\"\nquota = 1\n") + "[governance]\nidle_windw = \"5m\"\n";
    assert_eq!(hint(&only(&typo)), "did you mean `idle_window`?");
}

#[test]
fn accountd_values_are_checked() {
    let source = format!(
        "{}[accountd]\nmetrics_listen = \"localhost:9477\"\nidle_threshold_percent = 150\nfairshare_dampening = 0.5\nborrowed_cost_factor = -1\ndatabase = \"\"\nidle_cost_split = \"usage\"\n",
        with_team("name = \"a\"\nquota = 1\n")
    );
    let problems = problems(&source);
    let found: Vec<(usize, usize)> = problems.iter().map(place).collect();
    assert_eq!(
        found,
        [
            position(&source, "\"localhost:9477\""),
            position(&source, "150"),
            position(&source, "0.5"),
            position(&source, "-1"),
            position(&source, "\"\""),
            position(&source, "\"usage\""),
        ]
    );
    assert!(problems[0].message.contains("not an IP address and port"));
    assert!(problems[1].message.contains("between 0 and 100"));
    assert!(problems[2].message.contains("1 or more"));
    assert!(problems[3].message.contains("0 or more"));
    assert!(problems[4].message.contains("must not be empty"));
}

#[test]
fn cluster_values_are_checked() {
    let source = "[cluster]\nname = \"\"\npartitions = [\"gpu\", 3, \"\", \"gpu\"]\nidle_sharing = \"fairshare\"\ncurrency = 978\n\n[[team]]\nname = \"a\"\nquota = 1\n";
    let problems = problems(source);
    let found: Vec<(usize, usize)> = problems.iter().map(place).collect();
    assert_eq!(
        found,
        [
            position(source, "\"\""),
            position(source, "3,"),
            position_nth(source, "\"\"", 1),
            position_nth(source, "\"gpu\"", 1),
            position(source, "\"fairshare\""),
            position(source, "978"),
        ]
    );
    assert_eq!(hint(&problems[4]), "did you mean \"fair-share\"?");

    let empty = format!("{CLUSTER}partitions = []\n[[team]]\nname = \"a\"\nquota = 1\n");
    assert!(only(&empty).message.contains("is empty"));
}

#[test]
fn required_parts_are_reported_missing() {
    let problem = only("[[team]]\nname = \"a\"\nquota = 1\n");
    assert_eq!(place(&problem), (1, 1));
    assert_eq!(problem.message, "missing [cluster] section");

    let problem = only(CLUSTER);
    assert_eq!(problem.message, "no [[team]] defined");

    let source = format!("{CLUSTER}\n\n[[team]]\nweight = 2\n");
    let problems = problems(&source);
    let found: Vec<((usize, usize), &str)> = problems
        .iter()
        .map(|p| (place(p), p.message.as_str()))
        .collect();
    let header = position(&source, "[[team]]");
    assert_eq!(
        found,
        [
            (header, "missing `name` in [[team]]"),
            (header, "missing `quota` in [[team]]"),
        ]
    );

    let problem = only("[cluster]\npartitions = [\"gpu\"]\n[[team]]\nname = \"a\"\nquota = 1\n");
    assert_eq!(
        (problem.line, problem.column, problem.message.as_str()),
        (1, 1, "missing `name` in [cluster]")
    );
}

#[test]
fn sections_of_the_wrong_shape_say_how_to_write_them() {
    let single = format!("{CLUSTER}[team]\nname = \"a\"\nquota = 1\n");
    let problem = only(&single);
    assert_eq!(place(&problem), position(&single, "[team]"));
    assert_eq!(
        problem.message,
        "`team` must be an array of tables, not a table"
    );
    assert_eq!(
        hint(&problem),
        "write each entry as its own [[team]] section (double brackets)"
    );

    let many = "[[cluster]]\nname = \"c\"\n[[team]]\nname = \"a\"\nquota = 1\n";
    let problem = only(many);
    assert_eq!(
        problem.message,
        "[cluster] must be a table, not an array of tables"
    );

    let flat = format!("gpu_types = 3\n{CLUSTER}[[team]]\nname = \"a\"\nquota = 1\n");
    let problem = only(&flat);
    assert_eq!(place(&problem), (1, 13));
    assert_eq!(
        problem.message,
        "[gpu_types] must be a table, not an integer"
    );
}

#[test]
fn every_problem_of_a_file_is_reported_at_once_in_line_order() {
    let source = r#"[cluster]
name = "gpu-cluster"
idle_sharing = "round-robin"

[gpu_types.h100]
rate_per_hour = -1

[[team]]
name = "agents"
quotaa = 2

[[team]]
name = "agents"
quota = { a100 = 1 }

[governance]
state_max_age = "soon"
"#;
    let error = parse(source, "teamshare.toml").unwrap_err();
    let problems = error.diagnostics().unwrap();
    let lines: Vec<usize> = problems.iter().map(|p| p.line).collect();
    assert_eq!(lines, [3, 6, 10, 13, 14, 17], "{error}");
    // Display: one diagnostic after another, each with its hint.
    let text = error.to_string();
    assert_eq!(text.matches(": error: ").count(), 6, "{text}");
    assert_eq!(text.matches("\n  hint: ").count(), 6, "{text}");
    assert!(
        text.starts_with("teamshare.toml:3:16: error: unknown value \"round-robin\""),
        "{text}"
    );
}

const TYPES: &str = "[gpu_types.h100]\nrate_per_hour = 4\n[gpu_types.a100]\nrate_per_hour = 2\n";

#[test]
fn an_untyped_quota_beside_typed_ones_is_refused_at_its_quota() {
    // agents' typed quota makes the configuration typed; training's untyped 4 could only be
    // honoured by taking GPUs from typed guarantees. research's 0 guarantees nothing: fine.
    let source = format!(
        "{CLUSTER}{TYPES}[[team]]\nname = \"agents\"\nquota = {{ h100 = 2 }}\n[[team]]\nname = \"training\"\nquota = 4\n[[team]]\nname = \"research\"\nquota = 0\n"
    );
    let problem = only(&source);
    // At the value: `quota = 4` on its line, column 9.
    assert_eq!(place(&problem), (position(&source, "quota = 4").0, 9));
    assert_eq!(
        problem.message,
        "team `training` has an untyped quota of 4 GPUs, but team `agents` gives its GPUs per type"
    );
    assert!(hint(&problem).contains("quota = { h100 = 4 }"), "{problem}");

    // A borrow limit per type types the configuration as well.
    let borrow = format!(
        "{CLUSTER}{TYPES}[[team]]\nname = \"agents\"\nquota = 0\nborrow_limit = {{ a100 = 2 }}\n[[team]]\nname = \"training\"\nquota = 4\n"
    );
    assert!(only(&borrow)
        .message
        .starts_with("team `training` has an untyped quota"));
}

#[test]
fn per_type_limits_name_offered_types_and_lend_at_most_the_typed_quota() {
    let source = format!(
        "{CLUSTER}{TYPES}[[team]]\nname = \"a\"\nquota = {{ h100 = 2 }}\nborrow_limit = {{ a10 = 1 }}\nlend_limit = {{ h100 = 3, a100 = 1 }}\n"
    );
    let problems = problems(&source);
    let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "GPU type `a10` in the borrow limit of [[team]] is not offered",
            "`lend_limit` in [[team]] lends 1 a100, above the team's a100 quota of 0",
            "`lend_limit` in [[team]] lends 3 h100, above the team's h100 quota of 2",
        ],
        "{problems:#?}"
    );
    assert!(hint(&problems[0]).starts_with("did you mean `a100`?"));

    // `default` prices untyped GPUs; it is no type a quota can name.
    let default = format!(
        "{CLUSTER}[gpu_types.default]\nrate_per_hour = 1\n[[team]]\nname = \"a\"\nquota = {{ default = 2 }}\n"
    );
    let problem = only(&default);
    assert_eq!(place(&problem), position(&default, "default = 2"));
    assert!(
        problem.message.starts_with("`default` in the quota"),
        "{problem}"
    );
    assert!(hint(&problem).contains("an untyped quota = N"), "{problem}");
}
