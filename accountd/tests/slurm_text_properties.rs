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

// ---------------------------------------------------------------------------------------------
// parsable: the splitter every reader uses.

proptest! {
    #![proptest_config(config(256))]

    /// `fields` agrees with a split of the line on `|` for each shape, whatever the line, and
    /// a field count error counts the fields there are.
    #[test]
    fn fields_match_a_plain_split(line in junk(), n in 0usize..4) {
        let pieces: Vec<&str> = line.split('|').collect();
        match n {
            0 => check_fields::<1>(&line, &pieces),
            1 => check_fields::<2>(&line, &pieces),
            2 => check_fields::<5>(&line, &pieces),
            _ => check_fields::<24>(&line, &pieces),
        }
    }

    /// Fields written without `|` are read back as written, in every shape.
    #[test]
    fn written_fields_read_back(f in vec("[^|]{0,12}", 3), rest in "[^\n]{0,20}") {
        let line = f.join("|");
        let read: [&str; 3] = parsable::fields(&line, Shape::Exactly).unwrap();
        prop_assert_eq!(read.to_vec(), f.clone());
        let read: [&str; 3] = parsable::fields(&line, Shape::Leading).unwrap();
        prop_assert_eq!(read.to_vec(), f.clone());
        // The last field of `Rest` is all that follows, separators included.
        let longer = format!("{line}|{rest}");
        let read: [&str; 3] = parsable::fields(&longer, Shape::Rest).unwrap();
        prop_assert_eq!(&read[..2], &f[..2]);
        prop_assert_eq!(read[2].to_string(), format!("{}|{rest}", f[2]));
    }

    /// `lines` gives every non-blank line with its true number, and nothing else.
    #[test]
    fn lines_keep_their_numbers(text in soup()) {
        let got: Vec<(usize, &str)> = parsable::lines(&text).collect();
        prop_assert_eq!(got, non_blank(&text));
    }

    /// A malformed line keeps at most [`parsable::TEXT_LIMIT`] characters of the line, cut at
    /// a character (never inside one), `…` marking a cut.
    #[test]
    fn malformed_lines_keep_a_bounded_prefix(line in junk(), extra in "[^\n]{0,400}") {
        let line = format!("{line}{extra}");
        let m = MalformedLine::new("squeue", 3, "bad", &line);
        let kept = m.content.strip_suffix('…').unwrap_or(&m.content);
        prop_assert!(line.starts_with(kept));
        prop_assert!(kept.chars().count() <= parsable::TEXT_LIMIT);
        prop_assert_eq!(
            m.content.ends_with('…') && kept.len() < line.len(),
            line.chars().count() > parsable::TEXT_LIMIT
        );
        prop_assert!(m.to_string().starts_with("squeue line 3: bad: `"));
    }
}

fn check_fields<const N: usize>(line: &str, pieces: &[&str]) {
    let exactly = parsable::fields::<N>(line, Shape::Exactly);
    if pieces.len() == N {
        assert_eq!(exactly.unwrap().to_vec(), pieces);
    } else {
        let e = exactly.unwrap_err();
        assert_eq!((e.expected, e.at_least, e.found), (N, false, pieces.len()));
    }
    let leading = parsable::fields::<N>(line, Shape::Leading);
    let rest = parsable::fields::<N>(line, Shape::Rest);
    if pieces.len() >= N {
        assert_eq!(leading.unwrap().to_vec(), &pieces[..N]);
        let rest = rest.unwrap();
        assert_eq!(&rest[..N - 1], &pieces[..N - 1]);
        assert_eq!(rest.join("|"), line);
    } else {
        for e in [leading.unwrap_err(), rest.unwrap_err()] {
            assert_eq!((e.expected, e.at_least, e.found), (N, true, pieces.len()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// squeue: the governor's reader.

/// "Now" of the squeue properties: 2026-11-30T03:17:00Z.
const NOW: i64 = 1_796_008_620;

/// A job as the generator writes it into squeue's fields, and as the governor must read it.
#[derive(Debug, Clone)]
struct SqueueJob {
    id: u64,
    account: String,
    state: &'static str,
    priority: u32,
    submit: i64,
    start: Option<i64>,
    /// Running: the allocation's GPUs; pending: the GPUs asked per job or per node.
    gpus: u32,
    per_node: bool,
    gpu_type: Option<String>,
    nodes: u32,
    reason: &'static str,
    batch: bool,
    /// The node list as written, and the names it stands for.
    node_list: (String, Vec<String>),
    eligible_time: Option<i64>,
    comment: String,
}

const STATES: [&str; 4] = ["PENDING", "RUNNING", "COMPLETING", "SUSPENDED"];
const REASONS: [&str; 9] = [
    "Priority",
    "Resources",
    "None",
    "QOSGrpGRES",
    "BeginTime",
    "Dependency",
    "JobHeldUser",
    "JobHeldAdmin",
    "Reservation",
];

/// A host list as Slurm compresses it, with the names it expands to.
fn host_list() -> impl Strategy<Value = (String, Vec<String>)> {
    let part = prop_oneof![
        "[a-z][a-z0-9-]{0,6}[a-z]".prop_map(|n| (n.clone(), vec![n])),
        ("[a-z]{1,4}-?", 0u64..120, 0u64..6, 1usize..4).prop_map(|(prefix, lo, len, width)| {
            let (a, b) = (format!("{lo:0width$}"), format!("{:0width$}", lo + len));
            let names = (lo..=lo + len)
                .map(|n| format!("{prefix}{n:0w$}", w = a.len()))
                .collect();
            (format!("{prefix}[{a}-{b}]"), names)
        }),
    ];
    vec(part, 1..4).prop_map(|parts| {
        let text = parts
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>()
            .join(",");
        (text, parts.into_iter().flat_map(|(_, n)| n).collect())
    })
}

fn squeue_job() -> impl Strategy<Value = SqueueJob> {
    let times = (
        instant(),
        prop::option::of(instant()),
        prop::option::of(prop_oneof![
            NOW - 86_400..NOW + 86_400,
            NOW + governance::PARKED_AFTER_SECS - 2..NOW + governance::PARKED_AFTER_SECS + 2,
            instant(),
        ]),
    );
    let comment = prop_oneof![
        "[^\n\r]{0,30}",
        "[^\n\r]{0,20}".prop_map(|c| format!("{}: {c}", governance::PARK_HOLD_MARK)),
    ];
    (
        (
            1u64..u64::from(u32::MAX),
            name(),
            prop::sample::select(&STATES[..]),
            prop_oneof![Just(0u32), any::<u32>()],
            times,
        ),
        (0u32..200, any::<bool>(), gpu_type(), 1u32..9),
        (
            prop::sample::select(&REASONS[..]),
            any::<bool>(),
            host_list(),
            comment,
        ),
    )
        .prop_map(
            |(
                (id, account, state, priority, (submit, start, eligible_time)),
                (gpus, per_node, gpu_type, nodes),
                (reason, batch, node_list, comment),
            )| SqueueJob {
                id,
                account,
                state,
                priority,
                submit,
                start,
                gpus,
                per_node,
                gpu_type,
                nodes,
                reason,
                batch,
                node_list,
                eligible_time,
                comment,
            },
        )
}

/// The job's line as `squeue -O JobID:|,Account:|,...,admin_comment:|` prints it.
fn squeue_line(j: &SqueueJob) -> String {
    let utc = FixedOffset::east_opt(0).unwrap();
    let time = |t: Option<i64>| t.map_or("N/A".to_string(), |t| slurm_time(t, &utc));
    let running = j.state != "PENDING";
    let typed = |sep: &str| {
        j.gpu_type
            .as_ref()
            .map_or(String::new(), |t| format!("{sep}{t}"))
    };
    let alloc = if running {
        let mut a = format!(
            "cpu={},mem=1G,node={},gres/gpu={}",
            j.nodes, j.nodes, j.gpus
        );
        if let Some(t) = j.gpu_type.as_ref().filter(|_| j.gpus > 0) {
            a.push_str(&format!(",gres/gpu:{t}={}", j.gpus));
        }
        a
    } else {
        "N/A".to_string()
    };
    let ask = format!("gres:gpu{}:{}", typed(":"), j.gpus);
    let (per_job, per_node) = match (running, j.per_node) {
        (true, _) => ("N/A".to_string(), format!("gres:gpu:{}", j.gpus)),
        (false, true) => ("N/A".to_string(), ask),
        (false, false) => (ask, "N/A".to_string()),
    };
    let fields = [
        j.id.to_string(),
        j.account.clone(),
        j.state.to_string(),
        j.priority.to_string(),
        time(Some(j.submit)),
        time(j.start),
        alloc,
        per_job,
        per_node,
        "N/A".into(),
        j.nodes.to_string(),
        j.nodes.to_string(),
        j.reason.into(),
        u8::from(j.batch).to_string(),
        if running {
            j.node_list.0.clone()
        } else {
            "(null)".into()
        },
        time(j.eligible_time),
        j.id.to_string(),
        "N/A".into(),
        "N/A".into(),
        "*".into(),
        "OK".into(),
        "N/A".into(),
        "N/A".into(),
        j.comment.clone(),
    ];
    format!("{}|\n", fields.join("|"))
}

/// The job the governor must read from [`squeue_line`], by the rules of `squeue::read_squeue`'s
/// documentation, written out here.
fn expected_job(j: &SqueueJob) -> ClusterJob {
    let running = j.state != "PENDING";
    let park_held =
        !running && j.priority == 0 && j.comment.trim().starts_with(governance::PARK_HOLD_MARK);
    let waits_for_resources = !(j.reason == "BeginTime"
        || j.reason.starts_with("Dependency")
        || j.reason.starts_with("JobHeld")
        || j.reason == "Reservation");
    ClusterJob {
        id: j.id,
        team: j.account.clone(),
        phase: if running {
            Phase::Running
        } else {
            Phase::Pending
        },
        gpus: if !running && j.per_node {
            j.gpus * j.nodes
        } else {
            j.gpus
        },
        gpu_type: j.gpu_type.clone().filter(|_| j.gpus > 0),
        priority: j.priority,
        submit: j.submit,
        start: if running { j.start } else { None },
        eligible: running
            || ((park_held || waits_for_resources) && j.eligible_time.is_some_and(|t| t <= NOW)),
        parked: !running
            && j.eligible_time
                .is_some_and(|t| t - NOW >= governance::PARKED_AFTER_SECS),
        park_held,
        batch: j.batch,
        nodes: if running {
            j.node_list.1.clone()
        } else {
            Vec::new()
        },
        node_count: j.nodes,
        completing: j.state == "COMPLETING",
        tasks: 1,
    }
}

/// Jobs of distinct ids (an array's pending tasks share an id and are read once).
fn squeue_jobs(max: usize) -> impl Strategy<Value = Vec<SqueueJob>> {
    vec(squeue_job(), 0..max).prop_map(|mut jobs| {
        let mut seen = std::collections::BTreeSet::new();
        jobs.retain(|j| seen.insert(j.id));
        jobs
    })
}

proptest! {
    #![proptest_config(config(256))]

    /// No text fails a squeue pass or panics it; every line reported unreadable is the line of
    /// its number; no line gives more than one job; `pending_reasons` and the host lists read
    /// whatever they are given.
    #[test]
    fn squeue_reads_any_text(text in soup(), node_gpus in 0u32..16) {
        let read = squeue::read_squeue(&text, NOW, node_gpus);
        for u in &read.unreadable {
            prop_assert_eq!(u.command, "squeue");
            assert_names_its_line(&text, u);
        }
        let numbers: Vec<usize> = read.unreadable.iter().map(|u| u.line_number).collect();
        prop_assert!(numbers.windows(2).all(|w| w[0] <= w[1]), "{:?}", numbers);
        prop_assert!(read.jobs.len() <= non_blank(&text).len());
        let (jobs, unreadable) = squeue::parse_squeue(&text, NOW);
        prop_assert_eq!(jobs.len(), read.jobs.len());
        prop_assert_eq!(unreadable, read.unreadable);
        squeue::pending_reasons(&text);
        for (_, line) in non_blank(&text) {
            squeue::expand_hostlist(line);
        }
    }

    /// A valid line with one field replaced by anything a user could write is never a panic;
    /// the line's job is kept or the line reported, never lost in silence.
    #[test]
    fn squeue_survives_any_field(
        j in squeue_job(),
        field in 0usize..24,
        value in junk_field(),
        node_gpus in 0u32..16,
    ) {
        let line = squeue_line(&j);
        let mut f: Vec<&str> = line.trim_end_matches('\n').split('|').collect();
        f[field] = &value;
        let text = format!("{}\n", f.join("|"));
        let read = squeue::read_squeue(&text, NOW, node_gpus);
        for u in &read.unreadable {
            assert_names_its_line(&text, u);
        }
        // A state that is not one of the four is a job the governor does not count.
        let state = text.split('|').nth(2).unwrap_or("").trim();
        let counted = matches!(state, "PENDING" | "RUNNING" | "COMPLETING" | "SUSPENDED");
        prop_assert!(
            read.jobs.len() == 1 || !read.unreadable.is_empty() || !counted,
            "{text:?}: {read:?}"
        );
    }

    /// Lines written from generated jobs are read back as exactly those jobs, in order.
    #[test]
    fn squeue_reads_back_what_was_written(jobs in squeue_jobs(8)) {
        let text: String = jobs.iter().map(squeue_line).collect();
        let read = squeue::read_squeue(&text, NOW, 8);
        prop_assert!(read.unreadable.is_empty(), "{:?}", read.unreadable);
        prop_assert!(read.leaders.is_empty() && read.addresses.is_empty());
        prop_assert_eq!(read.jobs.len(), jobs.len());
        for (got, j) in read.jobs.iter().zip(&jobs) {
            prop_assert_eq!(got, &expected_job(j), "{}", squeue_line(j));
        }
        let reasons = squeue::pending_reasons(&text);
        let pending: BTreeMap<u64, String> = jobs
            .iter()
            .filter(|j| j.state == "PENDING")
            .map(|j| (j.id, j.reason.to_string()))
            .collect();
        prop_assert_eq!(reasons, pending);
    }

    /// One malformed line among valid ones (and blank lines anywhere) loses only itself, and
    /// is reported with its number.
    #[test]
    fn a_bad_squeue_line_loses_only_itself(
        jobs in squeue_jobs(6),
        at in any::<prop::sample::Index>(),
        bad in prop_oneof![
            "[^|\n\r]{1,40}".prop_filter("not blank", |s| !s.trim().is_empty()),
            vec("[^|\n\r]{0,6}", 2..23).prop_map(|f| format!("7|{}", f.join("|"))),
            "x[0-9a-z_]{0,5}\\|agents\\|PENDING\\|1\\|".prop_map(|s| format!("{s}{}", "|".repeat(21))),
        ],
        blanks in vec(any::<prop::sample::Index>(), 0..3),
    ) {
        let mut lines: Vec<String> = jobs.iter().map(|j| squeue_line(j).trim_end().to_string()).collect();
        let at = at.index(lines.len() + 1);
        lines.insert(at, bad);
        let mut bad_number = at + 1;
        for b in blanks {
            let i = b.index(lines.len() + 1);
            lines.insert(i, "  ".to_string());
            if i < bad_number {
                bad_number += 1;
            }
        }
        let text = lines.join("\n");
        let read = squeue::read_squeue(&text, NOW, 8);
        let numbers: Vec<usize> = read.unreadable.iter().map(|u| u.line_number).collect();
        prop_assert_eq!(numbers, vec![bad_number], "{:?}", read.unreadable);
        assert_names_its_line(&text, &read.unreadable[0]);
        let want: Vec<ClusterJob> = jobs.iter().map(expected_job).collect();
        prop_assert_eq!(read.jobs, want);
    }

    /// An AdminComment may hold `|`: it is the rest of the line, and the job reads the same.
    #[test]
    fn squeue_admin_comments_may_hold_separators(j in squeue_job(), extra in "[^\n\r]{0,20}") {
        let mut with_bars = j.clone();
        with_bars.comment = format!("{}|{extra}|", j.comment);
        let read = squeue::read_squeue(&squeue_line(&with_bars), NOW, 8);
        prop_assert!(read.unreadable.is_empty(), "{:?}", read.unreadable);
        prop_assert_eq!(&read.jobs, &vec![expected_job(&with_bars)]);
        // Whether it is teamshare's parking reads from the comment's start only.
        prop_assert_eq!(read.jobs[0].park_held, expected_job(&j).park_held);
    }

    /// Host lists as Slurm compresses them expand to their names, in order; what is not one
    /// is `None` or some list, never a panic.
    #[test]
    fn host_lists_expand_to_their_names(list in host_list(), junk in junk()) {
        prop_assert_eq!(squeue::expand_hostlist(&list.0), Some(list.1));
        squeue::expand_hostlist(&junk);
    }
}

/// `count` values of `strategy` drawn with proptest's fixed seed.
fn samples<S: Strategy>(strategy: S, count: usize) -> Vec<S::Value> {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    (0..count)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect()
}

/// The generated squeue jobs reach every case the reader tells apart.
#[test]
fn generated_squeue_jobs_reach_every_case() {
    let jobs: Vec<ClusterJob> = samples(squeue_job(), 400)
        .iter()
        .map(expected_job)
        .collect();
    let pending = |j: &&ClusterJob| j.phase == Phase::Pending;
    assert!(jobs.iter().filter(pending).any(|j| j.eligible));
    assert!(jobs.iter().filter(pending).any(|j| !j.eligible));
    assert!(jobs.iter().any(|j| j.park_held) && jobs.iter().any(|j| j.parked));
    assert!(jobs.iter().any(|j| j.completing) && jobs.iter().any(|j| !j.batch));
    assert!(jobs.iter().any(|j| j.gpu_type.is_some()));
    assert!(jobs
        .iter()
        .any(|j| j.phase == Phase::Running && j.nodes.len() > 1));
    let records = samples(sacct_record(), 200);
    assert!(records.iter().any(|r| r.start.is_none()));
    assert!(records
        .iter()
        .any(|r| r.start.is_some() && r.end().is_some()));
    assert!(records
        .iter()
        .any(|r| r.elapsed.is_some_and(|e| e > 86_400)));
}

// ---------------------------------------------------------------------------------------------
// sacct: what ingest reads.

/// A sacct record as the generator writes it, with the values it must be read as.
#[derive(Debug, Clone)]
struct SacctRecord {
    raw: u32,
    job_id: String,
    names: [String; 5],
    state: String,
    submit: Option<i64>,
    start: Option<i64>,
    /// After the start (or the submission of a job that never started).
    end_after: Option<i64>,
    elapsed: Option<i64>,
    /// `[D-]HH:MM:SS` (else `MM:SS` when under an hour).
    elapsed_long: bool,
    gpus: u64,
    gpu_type: Option<String>,
    eligible: Option<i64>,
    limit_minutes: Option<i64>,
    nnodes: Option<u32>,
    none_word: &'static str,
}

fn sacct_record() -> impl Strategy<Value = SacctRecord> {
    let job_id = prop_oneof![
        Just(None),
        (1u32..100_000, 0u32..1000).prop_map(|(a, t)| Some(format!("{a}_{t}"))),
        (1u32..100_000).prop_map(|a| Some(format!("{a}+0"))),
        (1u32..100_000).prop_map(|a| Some(format!("{a}_[1-100%4]"))),
    ];
    let state = prop_oneof![
        Just("COMPLETED".to_string()),
        Just("RUNNING".to_string()),
        Just("PENDING".to_string()),
        Just("PREEMPTED".to_string()),
        (0u32..100_000).prop_map(|u| format!("CANCELLED by {u}")),
        "[A-Z_]{1,16}",
    ];
    (
        (
            any::<u32>(),
            job_id,
            [name(), name(), name(), name(), name()],
            state,
        ),
        (
            prop::option::of(instant()),
            prop::option::of(instant()),
            prop::option::of(0i64..400 * 86_400),
            prop::option::of(0i64..1000 * 86_400),
            any::<bool>(),
        ),
        (0u64..10_000, gpu_type(), prop::option::of(instant())),
        (
            prop::option::of(0i64..10_000_000),
            prop::option::of(0u32..100_000),
            prop::sample::select(&["Unknown", "None", ""][..]),
        ),
    )
        .prop_map(
            |(
                (raw, job_id, names, state),
                (submit, start, end_after, elapsed, elapsed_long),
                (gpus, gpu_type, eligible),
                (limit_minutes, nnodes, none_word),
            )| SacctRecord {
                raw,
                job_id: job_id.unwrap_or_else(|| raw.to_string()),
                names,
                state,
                submit,
                start,
                end_after,
                elapsed,
                elapsed_long,
                gpus,
                gpu_type,
                eligible,
                limit_minutes,
                nnodes,
                none_word,
            },
        )
}

impl SacctRecord {
    fn end(&self) -> Option<i64> {
        let from = self.start.or(self.submit).unwrap_or(NOW);
        self.end_after.map(|d| from + d)
    }

    fn tres(&self) -> String {
        if self.gpus == 0 {
            return "billing=1,cpu=1,mem=1024M,node=1".to_string();
        }
        let typed = self
            .gpu_type
            .as_ref()
            .map_or(String::new(), |t| format!(",gres/gpu:{t}={}", self.gpus));
        format!("billing=1,cpu=4,gres/gpu={}{typed},node=1", self.gpus)
    }

    fn by_type(&self) -> BTreeMap<String, u64> {
        match &self.gpu_type {
            Some(t) if self.gpus > 0 => BTreeMap::from([(t.clone(), self.gpus)]),
            _ => BTreeMap::new(),
        }
    }

    /// The line as `sacct -P -n -o <FIELDS>` prints it, times in `tz`.
    fn line(&self, tz: &FixedOffset) -> String {
        let time = |t: Option<i64>| t.map_or(self.none_word.to_string(), |t| slurm_time(t, tz));
        let elapsed = self.elapsed.map_or("INVALID".to_string(), |e| {
            let (d, h, m, s) = (e / 86_400, e % 86_400 / 3600, e % 3600 / 60, e % 60);
            match (d, h) {
                (0, 0) if !self.elapsed_long => format!("{m:02}:{s:02}"),
                (0, _) => format!("{h:02}:{m:02}:{s:02}"),
                _ => format!("{d}-{h:02}:{m:02}:{s:02}"),
            }
        });
        let [cluster, account, user, partition, qos] = &self.names;
        let fields = [
            self.raw.to_string(),
            self.job_id.clone(),
            cluster.clone(),
            account.clone(),
            user.clone(),
            partition.clone(),
            qos.clone(),
            self.state.clone(),
            time(self.submit),
            time(self.start),
            time(self.end()),
            elapsed,
            if self.start.is_some() {
                self.tres()
            } else {
                String::new()
            },
            time(self.eligible),
            self.limit_minutes
                .map_or("UNLIMITED".to_string(), |m| m.to_string()),
            self.nnodes.map_or(String::new(), |n| n.to_string()),
            self.tres(),
        ];
        debug_assert_eq!(fields.len(), sacct::FIELDS.len());
        fields.join("|")
    }

    /// What sacct's reader must make of [`SacctRecord::line`].
    fn expected(&self) -> Want {
        let [cluster, account, user, partition, qos] = self.names.clone();
        let time_limit = self.limit_minutes.map(|m| m * 60);
        let Some(start) = self.start else {
            return Want::Unstarted(UnstartedJob {
                cluster,
                job_id_raw: self.raw,
                job_id: self.job_id.clone(),
                account,
                user,
                partition,
                qos,
                state: self.state.clone(),
                submit: self.submit,
                eligible: self.eligible,
                end: self.end(),
                gpus: self.gpus,
                gpus_by_type: self.by_type(),
                time_limit,
                nnodes: self.nnodes,
                req_tres: self.tres(),
            });
        };
        Want::Run(JobRun {
            cluster,
            job_id_raw: self.raw,
            job_id: self.job_id.clone(),
            account,
            user,
            partition,
            qos,
            state: self.state.clone(),
            submit: self.submit,
            start,
            end: self.end(),
            elapsed: self.elapsed,
            gpus: self.gpus,
            gpus_by_type: self.by_type(),
            alloc_tres: self.tres(),
            eligible: self.eligible,
            time_limit,
            nnodes: self.nnodes,
        })
    }
}

fn zone() -> impl Strategy<Value = FixedOffset> {
    (-14 * 4..=14 * 4i32).prop_map(|q| FixedOffset::east_opt(q * 900).unwrap())
}

/// What sacct's reader must make of a line.
#[derive(Debug)]
enum Want {
    Run(JobRun),
    Unstarted(UnstartedJob),
}

/// sacct's Elapsed field.
const ELAPSED: usize = 11;

/// `r`'s line with `field` replaced by `value` is read, or refused naming that field.
fn check_field_error(r: &SacctRecord, tz: &FixedOffset, field: usize, value: &str) {
    let line = r.line(tz);
    let mut f: Vec<&str> = line.split('|').collect();
    f[field] = value;
    let line = f.join("|");
    if let Err(e) = sacct::read_line(&line, tz) {
        let e = e.to_string();
        let words = if value.contains('|') {
            &["fields"][..]
        } else {
            sacct_field_words(field)
        };
        assert!(
            words.iter().any(|w| e.contains(w)),
            "field {field} ({}) = {value:?}: {e}",
            sacct::FIELDS[field],
        );
    }
}

/// Which words an error about field `i` of sacct's line must hold.
fn sacct_field_words(i: usize) -> &'static [&'static str] {
    match i {
        0 => &["JobIDRaw"],
        8 => &["Submit"],
        9 => &["Start", "End is before Start"],
        10 => &["End"],
        11 => &["Elapsed"],
        12 => &["AllocTRES"],
        13 => &["Eligible"],
        14 => &["TimelimitRaw"],
        15 => &["NNodes"],
        16 => &["ReqTRES"],
        _ => &[],
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// No text panics sacct's reader; every line is a run, a job that never started or a
    /// malformed line reported with its number and text.
    #[test]
    fn sacct_reads_any_text(text in soup(), tz in zone()) {
        let batch = sacct::parse(&text, &tz);
        let lines = non_blank(&text);
        prop_assert_eq!(batch.lines, lines.len());
        prop_assert_eq!(batch.runs.len() + batch.unstarted.len() + batch.malformed.len(), lines.len());
        prop_assert_eq!(batch.not_started, batch.unstarted.len());
        for m in &batch.malformed {
            prop_assert_eq!(m.command, sacct::COMMAND);
            assert_names_its_line(&text, m);
            prop_assert_eq!(
                &sacct::read_line(text.lines().nth(m.line_number - 1).unwrap(), &tz)
                    .unwrap_err()
                    .to_string(),
                &m.reason
            );
        }
    }

    /// A valid record with one field replaced by anything is read or refused, never a panic;
    /// a refusal names the field replaced (or the count of fields, for a value with `|`).
    /// Every field but Elapsed: see [`sacct_elapsed_errors_name_the_field`].
    #[test]
    fn sacct_errors_name_the_field(
        r in sacct_record(),
        tz in zone(),
        field in (0usize..16).prop_map(|f| if f >= ELAPSED { f + 1 } else { f }),
        value in junk_field(),
    ) {
        check_field_error(&r, &tz, field, &value);
    }

    /// [`sacct_errors_name_the_field`] for Elapsed (it found the overflow of
    /// `200000000000000000:0`, now malformed).
    #[test]
    fn sacct_elapsed_errors_name_the_field(
        r in sacct_record(),
        tz in zone(),
        value in junk_field(),
    ) {
        check_field_error(&r, &tz, ELAPSED, &value);
    }

    /// Records written from generated values read back as exactly those values, in any zone.
    #[test]
    fn sacct_reads_back_what_was_written(records in vec(sacct_record(), 0..8), tz in zone()) {
        let text: String = records.iter().map(|r| r.line(&tz) + "\n").collect();
        let batch = sacct::parse(&text, &tz);
        prop_assert!(batch.malformed.is_empty(), "{:?}", batch.malformed);
        let (mut runs, mut unstarted) = (Vec::new(), Vec::new());
        for r in &records {
            match r.expected() {
                Want::Run(run) => runs.push(run),
                Want::Unstarted(job) => unstarted.push(job),
            }
        }
        prop_assert_eq!(batch.runs, runs);
        prop_assert_eq!(batch.unstarted, unstarted);
        prop_assert_eq!(batch.lines, records.len());
        for r in &records {
            let line = r.line(&tz);
            let one = sacct::read_line(&line, &tz).unwrap();
            prop_assert_eq!(matches!(one, Record::Run(_)), r.start.is_some());
        }
    }

    /// One malformed line among valid ones (and blank lines anywhere) loses only itself.
    #[test]
    fn a_bad_sacct_line_loses_only_itself(
        records in vec(sacct_record(), 0..6),
        at in any::<prop::sample::Index>(),
        bad in prop_oneof![
            "[^\n\r]{1,40}".prop_filter("not blank", |s| !s.trim().is_empty()),
            vec("[^|\n\r]{0,6}", 18..20).prop_map(|f| f.join("|")),
        ],
        blanks in vec(any::<prop::sample::Index>(), 0..3),
    ) {
        let utc = FixedOffset::east_opt(0).unwrap();
        let mut lines: Vec<String> = records.iter().map(|r| r.line(&utc)).collect();
        let at = at.index(lines.len() + 1);
        lines.insert(at, bad);
        let mut bad_number = at + 1;
        for b in blanks {
            let i = b.index(lines.len() + 1);
            lines.insert(i, String::new());
            if i < bad_number {
                bad_number += 1;
            }
        }
        let text = lines.join("\n");
        let batch = sacct::parse(&text, &utc);
        let numbers: Vec<usize> = batch.malformed.iter().map(|m| m.line_number).collect();
        prop_assert_eq!(numbers, vec![bad_number]);
        assert_names_its_line(&text, &batch.malformed[0]);
        prop_assert_eq!(batch.runs.len() + batch.unstarted.len(), records.len());
        let want: Vec<JobRun> = records
            .iter()
            .filter_map(|r| match r.expected() {
                Want::Run(run) => Some(run),
                Want::Unstarted(_) => None,
            })
            .collect();
        prop_assert_eq!(batch.runs, want);
    }
}

/// Bytes of sacct output: valid records, junk lines and lines that are not UTF-8.
fn sacct_bytes() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let utc = FixedOffset::east_opt(0).unwrap();
    let line = prop_oneof![
        3 => sacct_record().prop_map(move |r| r.line(&utc).into_bytes()),
        1 => junk_field().prop_map(String::into_bytes),
        1 => (sacct_record(), vec(any::<u8>(), 1..4), any::<prop::sample::Index>()).prop_map(
            move |(r, bytes, at)| {
                let mut line = r.line(&utc).into_bytes();
                let at = at.index(line.len() + 1);
                line.splice(at..at, bytes.into_iter().map(|b| b | 0x80));
                line
            }
        ),
        1 => vec(any::<u8>().prop_filter("one line", |b| *b != b'\n'), 0..40),
    ]
    // A line's own `\r` at its end would be taken for half of a `\r\n`.
    .prop_map(|mut line: Vec<u8>| {
        while line.last() == Some(&b'\r') {
            line.pop();
        }
        line
    });
    vec(line, 0..10)
}

proptest! {
    #![proptest_config(config(64))]

    /// Ingest reads sacct's output as bytes: a line that is not UTF-8 is one malformed line
    /// (named by its number), every other line is read as `sacct::read_line` reads it, and the
    /// valid runs are all stored.
    #[test]
    fn ingest_reads_any_bytes(lines in sacct_bytes(), crlf in any::<bool>()) {
        let utc = FixedOffset::east_opt(0).unwrap();
        let mut out = Vec::new();
        for l in &lines {
            out.extend_from_slice(l);
            out.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
        }
        let mut store = Store::open_in_memory().unwrap();
        let plan = ingest::plan(&store, "c", Some(0), Some(NOW), NOW).unwrap();
        let summary =
            ingest::store_reader(&mut store, &plan, &mut &out[..], &utc, NOW, &mut |_| {}).unwrap();
        let mut want_malformed = Vec::new();
        let mut read = 0;
        let mut runs = std::collections::BTreeSet::new();
        for (i, bytes) in lines.iter().enumerate() {
            let text = std::str::from_utf8(bytes);
            if text.is_ok_and(|t| t.trim().is_empty()) {
                continue;
            }
            read += 1;
            match text {
                Err(_) => want_malformed.push((i + 1, "the line is not UTF-8".to_string())),
                Ok(t) => match sacct::read_line(t, &utc) {
                    Err(e) => want_malformed.push((i + 1, e.to_string())),
                    Ok(Record::Run(r)) => {
                        runs.insert((r.job_id_raw, r.start));
                    }
                    Ok(Record::Unstarted(_)) => {}
                },
            }
        }
        prop_assert_eq!(summary.read, read);
        let got: Vec<(usize, String)> = summary
            .malformed
            .iter()
            .map(|m| (m.line_number, m.reason.clone()))
            .collect();
        prop_assert_eq!(got, want_malformed);
        prop_assert_eq!(summary.stored.inserted, runs.len());
    }
}

// ---------------------------------------------------------------------------------------------
// The runaway check's job ids (`squeue -h -o %A`).

proptest! {
    #![proptest_config(config(512))]

    /// Ids written one a line (blank lines and spaces anywhere) read back as the same set; a
    /// line that is not an id fails the whole list and is named; nothing panics.
    #[test]
    fn job_ids_read_back_or_fail_whole(
        ids in vec(any::<u64>(), 0..20),
        pads in vec(("[ \t]{0,2}", "[ \t]{0,2}", any::<bool>()), 20),
        bad in prop::option::of(("[^\n\r]{1,30}", any::<prop::sample::Index>())),
        junk in any::<String>(),
    ) {
        let mut lines: Vec<String> = ids
            .iter()
            .zip(&pads)
            .map(|(id, (a, b, blank))| format!("{a}{id}{b}{}", if *blank { "\n" } else { "" }))
            .collect();
        let want: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
        let bad = bad.filter(|(b, _)| b.trim().parse::<u64>().is_err() && !b.trim().is_empty());
        if let Some((b, at)) = &bad {
            lines.insert(at.index(lines.len() + 1), b.clone());
        }
        let text = lines.join("\n");
        match (ingest::parse_job_ids(&text), bad) {
            (Ok(got), None) => prop_assert_eq!(got, want),
            (Err(e), Some((b, _))) => {
                let named: String = b.trim().chars().take(200).collect();
                prop_assert!(e.to_string().contains(&format!("`{named}`")), "{}", e);
            }
            (got, bad) => prop_assert!(false, "{:?} for {:?} in {:?}", got, bad, text),
        }
        let _ = ingest::parse_job_ids(&junk);
    }
}
