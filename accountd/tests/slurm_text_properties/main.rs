//! Property tests of the readers of Slurm's client commands' text (issue 28): the `|`-separated
//! splitter (`parsable`), squeue's records as the governor reads them (`squeue`), sacct's
//! records as ingest reads them (`sacct`, and `ingest::store_reader` for bytes), and the job
//! ids of the runaway check (`ingest::parse_job_ids`).
//!
//! Three kinds of property, each able to fail:
//! - whatever the text (`|`, newlines, NUL, huge numbers, non-UTF-8 bytes where bytes are
//!   read), nothing panics, and every line an error names is the line of that number;
//! - records written from generated values read back as exactly those values, field by field
//!   (a reference written here from the commands' documented formats);
//! - one malformed line among valid ones loses only itself, reported with its number.
//!
//! Fast by default (CI: a few hundred cases per property). The soak sets
//! `TEAMSHARE_PARSER_CASES` (or `PROPTEST_CASES`), e.g. `TEAMSHARE_PARSER_CASES=1000000 cargo
//! test --release -p accountd --test slurm_text_properties` (contrib/bench/property-soak.sh).

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;

use accountd::ingest;
use accountd::parsable::{self, MalformedLine, Shape};
use accountd::sacct::{self, JobRun, Record, UnstartedJob};
use accountd::squeue;
use accountd::store::Store;
use chrono::{FixedOffset, TimeZone};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use teamshare_policy::governance::{self, ClusterJob, Phase};

/// `default` cases per property, or the soak's count (`TEAMSHARE_PARSER_CASES`, else
/// `PROPTEST_CASES`).
fn config(default: u32) -> ProptestConfig {
    let cases = ["TEAMSHARE_PARSER_CASES", "PROPTEST_CASES"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(cases)
}

// ---------------------------------------------------------------------------------------------
// Generators shared by the readers.

/// A field's text that a user or a broken command could print: anything on one line, with the
/// shapes parsers trip on (huge and negative numbers, clock-like and date-like digits, Slurm's
/// words for nothing, TRES lists, separators, NUL and multi-byte characters).
fn junk() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9]{1,30}",
        "-?[0-9]{0,22}(-[0-9]{0,22})?(:[0-9]{0,22}){0,4}",
        "[+-]?[0-9]{1,6}(\\.[0-9]{0,4})?([eE][+-]?[0-9]{1,3})?",
        "[0-9]{1,5}-[0-9]{1,3}-[0-9]{1,3}T[0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3}",
        prop_oneof![
            Just("N/A"),
            Just("Unknown"),
            Just("None"),
            Just("(null)"),
            Just("UNLIMITED"),
            Just("Partition_Limit"),
            Just("INVALID"),
            Just("*"),
            Just(""),
        ]
        .prop_map(String::from),
        "((gres[/:]gpu(:[a-z0-9]{0,5})?[=:][0-9a-zA-Z]{0,22}|cpu=[0-9]{1,3}),?){1,3}",
        "[a-z]{0,3}(\\[[0-9,\\-\\[\\]]{0,12}\\]?)?[a-z0-9]{0,2}",
        "[ \t|\\x00\\x7f\u{FFFD}é日%_\\[\\]]{0,8}",
    ]
}

/// [`junk`] kept to one line.
fn junk_field() -> impl Strategy<Value = String> {
    junk().prop_map(|s| s.replace(['\n', '\r'], " "))
}

/// Text of many lines of `|`-separated fields, some junk, some blank, `\n` or `\r\n` ends.
fn soup() -> impl Strategy<Value = String> {
    let line = vec(junk(), 0..26).prop_map(|f| f.join("|"));
    (vec((line, any::<bool>()), 0..8), junk()).prop_map(|(lines, tail)| {
        let mut text = String::new();
        for (line, crlf) in lines {
            text.push_str(&line);
            text.push_str(if crlf { "\r\n" } else { "\n" });
        }
        text.push_str(&tail);
        text
    })
}

/// Every line an error names is the line of that number, its text kept as
/// [`MalformedLine::new`] keeps it.
fn assert_names_its_line(text: &str, m: &MalformedLine) {
    let line = text
        .lines()
        .nth(m.line_number.wrapping_sub(1))
        .unwrap_or_else(|| panic!("{m}: no line {} in {text:?}", m.line_number));
    assert!(!line.trim().is_empty(), "{m} names a blank line");
    assert_eq!(
        m.content,
        MalformedLine::new(m.command, m.line_number, "", line).content,
        "{m}"
    );
}

/// The non-blank lines of `text` by number, as an administrator counts them.
fn non_blank(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
        .collect()
}

/// A time Slurm prints (`YYYY-MM-DDTHH:MM:SS`) of `t` in `tz`, written with chrono here.
fn slurm_time(t: i64, tz: &FixedOffset) -> String {
    tz.timestamp_opt(t, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

/// Instants between 2001 and 2099.
fn instant() -> impl Strategy<Value = i64> {
    978_307_200i64..4_070_908_800
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_.-]{1,12}"
}

fn gpu_type() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![Just("h100"), Just("a100"), Just("l40s")].prop_map(String::from))
}

mod parsable_props;
mod runaway_props;
mod sacct_props;
use sacct_props::*;
mod squeue_props;
use squeue_props::*;
