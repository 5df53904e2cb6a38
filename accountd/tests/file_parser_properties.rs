//! Property tests of the readers of files and arguments users give accountd (issue 28): SWF
//! traces and team maps (`replay::swf`), the GPU samples' spool files (`sample::spool`), and
//! the times of the command line (`period`).
//!
//! As in `slurm_text_properties.rs`: whatever the text or bytes, nothing panics and an error
//! names the right line; files written from generated values read back as those values (the
//! spool through its own writer); one bad line among good ones loses only itself (SWF, spool)
//! or is the one reported (a team map, read whole or not at all).
//!
//! Fast by default (CI); the soak sets `TEAMSHARE_PARSER_CASES` (or `PROPTEST_CASES`), e.g.
//! `TEAMSHARE_PARSER_CASES=1000000 cargo test --release -p accountd --test
//! file_parser_properties` (contrib/bench/property-soak.sh).

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::fs;

use accountd::period;
use accountd::replay::swf::{self, ProcUnit, SwfError, TeamMap};
use accountd::replay::{Observed, TraceJob};
use accountd::sample::spool::{self, NodeSpool};
use accountd::sample::Sample;
use chrono::{FixedOffset, TimeZone};
use proptest::collection::vec;
use proptest::prelude::*;

/// `default` cases per property, or the soak's count (`TEAMSHARE_PARSER_CASES`, else
/// `PROPTEST_CASES`).
fn config(default: u32) -> ProptestConfig {
    let cases = ["TEAMSHARE_PARSER_CASES", "PROPTEST_CASES"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(cases)
}

/// Text of any shape on one line: numbers of every size, words, separators, NUL, multi-byte.
fn junk() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^\n\r]{0,30}",
        "-?[0-9]{1,25}(\\.[0-9]{0,5})?([eE][+-]?[0-9]{1,4})?",
        "[a-zA-Z_ ]{0,8}[=:#;]{0,2}[ a-z0-9:.-]{0,12}",
        prop_oneof![Just("-1"), Just("-2"), Just("NaN"), Just("inf"), Just("")]
            .prop_map(String::from),
        "[ \t\\x00\u{FFFD}é日=#;:\\[\\]{}\",]{0,8}",
    ]
}

/// Lines of [`junk`], some blank, with the text's own shapes mixed in (`;` comments,
/// `key = value`).
fn soup() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        junk(),
        (junk(), junk()).prop_map(|(k, v)| format!("; {k}: {v}")),
        (junk(), junk()).prop_map(|(k, v)| format!("{k} = {v}")),
        vec(junk(), 0..20).prop_map(|f| f.join(" ")),
    ];
    vec(line, 0..10).prop_map(|l| l.join("\n"))
}

/// Whitespace between tokens: at least one blank.
fn gap() -> impl Strategy<Value = String> {
    "[ \t]{1,3}"
}

// ---------------------------------------------------------------------------------------------
// Team maps.

/// A team map as values, and its text written with blanks, comments and blank lines.
#[derive(Debug, Clone)]
struct MapFile {
    map: TeamMap,
    lines: Vec<String>,
}

fn team() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_.-]{1,12}"
}

fn map_file() -> impl Strategy<Value = MapFile> {
    let ids = || prop::collection::btree_map(0u64..50, team(), 0..6);
    (
        (ids(), ids(), ids()),
        (prop::option::of(team()), prop::option::of(team())),
        (
            prop::option::of(prop_oneof![
                (1u32..5).prop_map(ProcUnit::GpusPerProc),
                (1u32..9).prop_map(ProcUnit::ProcsPerGpu),
            ]),
            prop::option::of(1u32..17),
        ),
        vec(
            (
                "[ \t]{0,2}",
                "[ \t]{0,2}",
                prop::option::of("#[^\n\r]{0,12}"),
            ),
            64,
        ),
        any::<bool>(),
    )
        .prop_map(
            |(
                (users, groups, queues),
                (default, default_class),
                (procs, per_node),
                pads,
                prefix,
            )| {
                let mut entries: Vec<(String, String)> = Vec::new();
                for (kind, m) in [("user", &users), ("group", &groups)] {
                    entries.extend(m.iter().map(|(id, t)| (format!("{kind} {id}"), t.clone())));
                }
                entries.extend(
                    queues
                        .iter()
                        .map(|(id, c)| (format!("queue {id}"), format!("class:{c}"))),
                );
                if let Some(t) = &default {
                    entries.push(("default".into(), t.clone()));
                }
                if let Some(c) = &default_class {
                    // `class:` is optional here.
                    let c = if prefix {
                        format!("class:{c}")
                    } else {
                        c.clone()
                    };
                    entries.push(("default_class".into(), c));
                }
                match procs {
                    Some(ProcUnit::GpusPerProc(n)) => {
                        entries.push(("gpus_per_proc".into(), n.to_string()))
                    }
                    Some(ProcUnit::ProcsPerGpu(n)) => {
                        entries.push(("procs_per_gpu".into(), n.to_string()))
                    }
                    None => {}
                }
                if let Some(n) = per_node {
                    entries.push(("gpus_per_node".into(), n.to_string()));
                }
                let mut lines = vec![];
                for (i, (key, value)) in entries.iter().enumerate() {
                    let (a, b, comment) = &pads[i % pads.len()];
                    // A key's words may be apart by any blanks.
                    let key = key.replace(' ', if i % 2 == 0 { " " } else { " \t " });
                    lines.push(format!(
                        "{a}{key}{b}={a}{value}{b}{}",
                        comment.as_deref().unwrap_or("")
                    ));
                    if i % 3 == 0 {
                        lines.push(comment.clone().unwrap_or_default());
                    }
                }
                let map = TeamMap {
                    users,
                    groups,
                    queues,
                    default_team: default,
                    default_class,
                    procs: procs.unwrap_or(ProcUnit::GpusPerProc(1)),
                    gpus_per_node: per_node.unwrap_or(8),
                };
                MapFile { map, lines }
            },
        )
}

/// A line a team map refuses whatever else it holds (never a repeat of another entry).
fn bad_map_line() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,10}",
        (1000u64..2000, team()).prop_map(|(id, t)| format!("user {id} = {t} {t}")),
        team().prop_map(|t| format!("user x{t} = {t}")),
        (1000u64..2000, team()).prop_map(|(id, t)| format!("queue {id} = {t}")),
        (1000u64..2000, team()).prop_map(|(id, t)| format!("group {id} = class:{t}")),
        (1000u64..2000).prop_map(|id| format!("group {id} = a/b")),
        "[a-z]{1,6}".prop_map(|k| format!("no_such_{k} = 1")),
        Just("user = a".to_string()),
        Just("default =".to_string()),
    ]
}

proptest! {
    #![proptest_config(config(256))]

    /// A team map written from generated entries (blanks, comments and blank lines anywhere)
    /// reads back as those entries.
    #[test]
    fn team_maps_read_back(m in map_file()) {
        let text = m.lines.join("\n");
        let got = swf::parse_team_map(&text, "map.txt");
        prop_assert_eq!(got, Ok(m.map), "{}", text);
    }

    /// One bad line anywhere in a valid map is the error, named by its number and file.
    #[test]
    fn a_bad_team_map_line_is_named(
        m in map_file(),
        bad in bad_map_line(),
        at in any::<prop::sample::Index>(),
    ) {
        let mut lines = m.lines.clone();
        let at = at.index(lines.len() + 1);
        lines.insert(at, bad);
        let text = lines.join("\n");
        let e = swf::parse_team_map(&text, "map.txt").unwrap_err();
        prop_assert_eq!(e.line, at + 1, "{}", e);
        prop_assert!(e.to_string().starts_with(&format!("map.txt:{}: ", at + 1)), "{}", e);
    }

    /// An entry given twice is refused on its second line, naming the first.
    #[test]
    fn a_repeated_team_map_entry_names_both_lines(m in map_file(), pick in any::<prop::sample::Index>()) {
        let entries: Vec<(usize, &String)> = m
            .lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.split('#').next().unwrap_or("").contains('='))
            .collect();
        prop_assume!(!entries.is_empty());
        let (first, line) = entries[pick.index(entries.len())];
        let text = format!("{}\n{line}", m.lines.join("\n"));
        let e = swf::parse_team_map(&text, "map.txt").unwrap_err();
        prop_assert_eq!(e.line, m.lines.len() + 1);
        prop_assert!(e.reason.contains(&format!("first on line {}", first + 1)), "{}", e);
    }

    /// No text panics the team map's reader; an error names a line that holds an entry, and
    /// every line before it reads.
    #[test]
    fn team_maps_read_any_text(text in soup()) {
        if let Err(e) = swf::parse_team_map(&text, "f") {
            let lines: Vec<&str> = text.lines().collect();
            prop_assert!(e.line >= 1 && e.line <= lines.len(), "{}", e);
            let entry = lines[e.line - 1].split('#').next().unwrap_or("");
            prop_assert!(!entry.trim().is_empty(), "{}", e);
            let before = lines[..e.line - 1].join("\n");
            prop_assert!(swf::parse_team_map(&before, "f").is_ok(), "{}", e);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SWF traces.

/// One job line's values (SWF 2.2's 18 fields), all known but the ignored ones.
#[derive(Debug, Clone)]
struct SwfJob {
    number: u64,
    submit: i64,
    wait: i64,
    run: i64,
    procs: u64,
    /// The requested time (-1: unknown).
    req_time: i64,
    status: u64,
    user: u64,
    group: u64,
    queue: u64,
    /// Fields 6, 7, 10, 14, 16: read as numbers, never used.
    ignored: [i64; 5],
    /// How the times are written: `12`, `12.0`, `12.4` (rounded to 12).
    decimals: u8,
}

fn swf_job() -> impl Strategy<Value = SwfJob> {
    (
        (
            0i64..10_000_000,
            0i64..1_000_000,
            0i64..1_000_000,
            1u64..512,
        ),
        (
            prop_oneof![Just(-1i64), 0i64..2_000_000],
            prop_oneof![Just(0u64), Just(1)],
        ),
        (0u64..60, 0u64..60, 0u64..6),
        (
            [
                -1i64..100_000,
                -1i64..100_000,
                -1i64..100_000,
                -1i64..100,
                -1i64..100,
            ],
            0u8..3,
        ),
    )
        .prop_map(
            |(
                (submit, wait, run, procs),
                (req_time, status),
                (user, group, queue),
                (ignored, decimals),
            )| SwfJob {
                number: 0,
                submit,
                wait,
                run,
                procs,
                req_time,
                status,
                user,
                group,
                queue,
                ignored,
                decimals,
            },
        )
}

impl SwfJob {
    fn line(&self, gaps: &[String]) -> String {
        let time = |t: i64| match (self.decimals, t) {
            (_, -1) | (0, _) => t.to_string(),
            (1, _) => format!("{t}.0"),
            _ => format!("{t}.4"),
        };
        let fields = [
            self.number.to_string(),
            time(self.submit),
            time(self.wait),
            time(self.run),
            self.procs.to_string(),
            self.ignored[0].to_string(),
            self.ignored[1].to_string(),
            self.procs.to_string(),
            time(self.req_time),
            self.ignored[2].to_string(),
            self.status.to_string(),
            self.user.to_string(),
            self.group.to_string(),
            self.ignored[3].to_string(),
            self.queue.to_string(),
            self.ignored[4].to_string(),
            "-1".to_string(),
            "-1".to_string(),
        ];
        let mut line = gaps[0].clone();
        for (i, f) in fields.iter().enumerate() {
            line.push_str(f);
            line.push_str(&gaps[(i + 1) % gaps.len()]);
        }
        line
    }

    /// The trace job the module's documentation makes of this line under `map`, from `base`.
    fn expected(&self, map: &TeamMap, base: i64) -> TraceJob {
        let team = map
            .users
            .get(&self.user)
            .or_else(|| map.groups.get(&self.group))
            .or(map.default_team.as_ref())
            .unwrap()
            .clone();
        let gpus = match map.procs {
            ProcUnit::GpusPerProc(n) => self.procs * u64::from(n),
            ProcUnit::ProcsPerGpu(n) => self.procs.div_ceil(u64::from(n)),
        };
        let gpus = u32::try_from(gpus).unwrap();
        let submit = base + self.submit;
        let start = submit + self.wait;
        let limit = if self.req_time > 0 {
            self.req_time
        } else {
            self.run
        };
        TraceJob {
            id: self.number,
            team,
            class: map
                .queues
                .get(&self.queue)
                .or(map.default_class.as_ref())
                .cloned(),
            submit,
            eligible: submit,
            gpus,
            gpu_type: None,
            nodes: gpus.div_ceil(map.gpus_per_node).max(1),
            exclusive: false,
            time_limit: limit.max(self.run).max(1),
            work: self.run,
            cancelled_pending_at: None,
            observed: Observed {
                runs: vec![(start, Some(start + self.run))],
                ..Observed::default()
            },
        }
    }
}

/// An SWF file: a header, jobs numbered 1.. and a team map that maps every job.
#[derive(Debug, Clone)]
struct SwfFile {
    base: i64,
    max_procs: u64,
    jobs: Vec<SwfJob>,
    map: TeamMap,
    gaps: Vec<String>,
}

fn swf_file() -> impl Strategy<Value = SwfFile> {
    (
        0i64..2_000_000_000,
        1u64..100_000,
        vec(swf_job(), 1..12),
        map_file(),
        team(),
        vec(gap(), 1..5),
    )
        .prop_map(|(base, max_procs, mut jobs, m, default, gaps)| {
            for (i, j) in jobs.iter_mut().enumerate() {
                j.number = i as u64 + 1;
            }
            let mut map = m.map;
            map.default_team.get_or_insert(default);
            SwfFile {
                base,
                max_procs,
                jobs,
                map,
                gaps,
            }
        })
}

impl SwfFile {
    fn header(&self) -> Vec<String> {
        vec![
            "; Version: 2.2".to_string(),
            "; Computer: a generated machine: with colons".to_string(),
            format!(";{}UnixStartTime: {}", self.gaps[0], self.base),
            format!("; MaxProcs:{}{}", self.gaps[0], self.max_procs),
            ";".to_string(),
        ]
    }

    fn job_lines(&self) -> Vec<String> {
        self.jobs.iter().map(|j| j.line(&self.gaps)).collect()
    }

    fn expected(&self) -> Vec<TraceJob> {
        let mut jobs: Vec<TraceJob> = self
            .jobs
            .iter()
            .map(|j| j.expected(&self.map, self.base))
            .collect();
        jobs.sort_by_key(|j| (j.submit, j.id));
        jobs
    }
}

/// Comments and blank lines to put between job lines.
fn filler() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[ \t]{1,3}",
        "; [^\n\r]{0,20}",
        "; [A-Z][a-z]{0,8}: [^\n\r]{0,10}",
    ]
}

/// The module's own numeric header keys (anything else is free text).
const NUMERIC_KEYS: [&str; 9] = [
    "unixstarttime",
    "maxnodes",
    "maxprocs",
    "maxjobs",
    "maxrecords",
    "maxruntime",
    "maxmemory",
    "maxqueues",
    "maxpartitions",
];

proptest! {
    #![proptest_config(config(128))]

    /// An SWF file written from generated jobs reads back as those jobs, mapped as the
    /// documentation says, whatever the blanks, decimals and comments between them.
    #[test]
    fn swf_reads_back_what_was_written(f in swf_file(), fill in vec(filler(), 12)) {
        let mut lines = f.header();
        for (i, l) in f.job_lines().into_iter().enumerate() {
            lines.push(l);
            // Free-text comments only: a numeric key would be read.
            if !NUMERIC_KEYS.iter().any(|k| fill[i].to_ascii_lowercase().contains(k)) {
                lines.push(fill[i].clone());
            }
        }
        let text = lines.join("\n");
        let (trace, summary) = swf::load(&text, &f.map, None).unwrap();
        prop_assert_eq!(&trace.jobs, &f.expected());
        prop_assert_eq!(summary.records, f.jobs.len());
        prop_assert_eq!(summary.jobs, f.jobs.len());
        prop_assert_eq!(summary.malformed, 0);
        let capacity = match f.map.procs {
            ProcUnit::GpusPerProc(n) => f.max_procs * u64::from(n),
            ProcUnit::ProcsPerGpu(n) => f.max_procs.div_ceil(u64::from(n)),
        };
        prop_assert_eq!(u64::from(summary.capacity), capacity);
        prop_assert_eq!(
            trace.cluster.nodes.iter().map(|n| u64::from(n.gpus)).sum::<u64>(),
            capacity
        );
        prop_assert_eq!(summary.header.unix_start_time, Some(f.base));
        prop_assert_eq!(trace.since, f.base);
    }

    /// One malformed job line anywhere among valid ones loses only itself, and is reported
    /// with its number.
    #[test]
    fn a_bad_swf_line_loses_only_itself(
        f in swf_file(),
        at in any::<prop::sample::Index>(),
        bad in prop_oneof![
            vec("-?[0-9]{1,4}", 1..17).prop_map(|v| v.join(" ")),
            vec("-?[0-9]{1,4}", 19..22).prop_map(|v| v.join(" ")),
            "[a-zA-Z][^\n\r;]{0,30}",
            (
                // The times and processor counts, where 12 digits are out of bounds too.
                prop::sample::select(&[1usize, 2, 3, 4, 7, 8, 17][..]),
                "(-[2-9]|[a-z]{1,3}|[1-9][0-9]{11}|NaN|1e300)",
            )
                .prop_map(|(i, v)| {
                let mut f: Vec<String> = (0..18).map(|k| (1000 + k).to_string()).collect();
                f[i] = v;
                f.join(" ")
            }),
        ],
    ) {
        let header = f.header();
        let mut jobs = f.job_lines();
        let at = at.index(jobs.len() + 1);
        jobs.insert(at, bad);
        let text = [header.clone(), jobs].concat().join("\n");
        let (trace, summary) = swf::load(&text, &f.map, None).unwrap();
        prop_assert_eq!(&trace.jobs, &f.expected());
        prop_assert_eq!(summary.malformed, 1);
        prop_assert_eq!(summary.records, f.jobs.len() + 1);
        let m = &summary.malformed_first[0];
        prop_assert_eq!(m.line_number, header.len() + at + 1, "{}", m);
        prop_assert_eq!(m.command, "SWF");
    }

    /// A numeric header key given again with another value is an error on that line.
    #[test]
    fn a_contradicting_swf_header_is_named(f in swf_file(), at in any::<prop::sample::Index>()) {
        let mut lines = [f.header(), f.job_lines()].concat();
        // After the first MaxProcs (line 4).
        let at = 4 + at.index(lines.len() - 3);
        lines.insert(at, format!("; maxprocs: {}", f.max_procs + 1));
        let text = lines.join("\n");
        match swf::load(&text, &f.map, None) {
            Err(SwfError::Header { line, .. }) => prop_assert_eq!(line, at + 1),
            other => prop_assert!(false, "{:?}", other.map(|(_, s)| s)),
        }
    }

    /// No text panics the SWF reader; every line it reports is that line.
    #[test]
    fn swf_reads_any_text(
        text in soup(),
        jobs in vec(swf_job(), 0..3),
        capacity in prop::option::of(1u32..10_000),
    ) {
        // Some readable jobs among the junk, so that the mapping is reached too.
        let gaps = vec![" ".to_string()];
        let mut text = text;
        for (i, j) in jobs.iter().enumerate() {
            let mut j = j.clone();
            j.number = i as u64 + 1;
            text.push('\n');
            text.push_str(&j.line(&gaps));
        }
        let map = TeamMap {
            default_team: Some("t".into()),
            ..TeamMap::default()
        };
        // Without a capacity, one from the header: kept small (see the report of issue 28 on
        // MaxProcs, which sizes the cluster's node list).
        let text = if capacity.is_none() {
            format!("; MaxProcs: 64\n{text}")
        } else {
            text
        };
        let lines: Vec<&str> = text.lines().collect();
        match swf::load(&text, &map, capacity) {
            Ok((_, summary)) => {
                for m in &summary.malformed_first {
                    prop_assert!(lines[m.line_number - 1].trim().starts_with(m.content.trim_end_matches('…')), "{}", m);
                }
                prop_assert!(summary.jobs <= summary.records);
            }
            Err(SwfError::Header { line, .. }) => {
                prop_assert!(lines[line - 1].trim_start().starts_with(';'), "line {}", line);
            }
            Err(SwfError::NoJobs { first: Some(m), .. }) => {
                prop_assert!(lines[m.line_number - 1].trim().starts_with(m.content.trim_end_matches('…')), "{}", m);
            }
            Err(_) => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The spool of GPU samples.

fn node() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_-][a-zA-Z0-9_.-]{0,11}"
}

/// A sample that passes `Sample::check`, of `node`.
fn sample(node: String) -> impl Strategy<Value = Sample> {
    (
        ("[^\\s\\p{Cc}]{1,20}", 1i64..i64::MAX, 1i64..=3_600_000),
        (
            prop::option::of(any::<u32>()),
            prop::option::of((any::<u32>(), prop::option::of(any::<i64>()))),
        ),
        (0u32..=100, 0u32..=100, 0u64..=i64::MAX as u64),
        (
            prop::option::of(0u64..=u64::MAX),
            prop::option::of(any::<u32>()),
        ),
    )
        .prop_map(
            move |(
                (gpu_uuid, ts_ms, interval_ms),
                (minor, job),
                (util_gpu, util_mem, mem_used),
                (total, processes),
            )| {
                Sample {
                    node: node.clone(),
                    gpu_uuid,
                    ts_ms,
                    interval_ms,
                    minor,
                    job_id_raw: job.map(|(j, _)| j),
                    job_start: job.and_then(|(_, s)| s),
                    util_gpu,
                    util_mem,
                    mem_used,
                    mem_total: total.map(|t| t.max(mem_used)),
                    processes,
                }
            },
        )
}

fn node_and_samples(max: usize) -> impl Strategy<Value = (String, Vec<Sample>)> {
    node()
        .prop_filter("a node name", |n| n != "." && n != "..")
        .prop_flat_map(move |n| (Just(n.clone()), vec(sample(n), 1..max)))
}

/// A line a spool's reader refuses: not JSON, not a sample, a sample that fails its check,
/// or one of another node.
fn bad_sample_line(node: String) -> impl Strategy<Value = String> {
    let json = |s: &Sample| serde_json::to_string(s).unwrap();
    prop_oneof![
        "[^\n\r{]{1,30}".prop_filter("not blank", |s| !s.trim().is_empty()),
        sample(node.clone()).prop_map(move |s| json(&s)[..json(&s).len() - 1].to_string()),
        (sample(node.clone()), 101u32..).prop_map(move |(mut s, u)| {
            s.util_gpu = u;
            json(&s)
        }),
        (sample(node.clone()), i64::MIN..=0).prop_map(move |(mut s, t)| {
            s.ts_ms = t;
            json(&s)
        }),
        sample(node.clone()).prop_map(move |mut s| {
            s.node = format!("{}x", s.node);
            json(&s)
        }),
        (
            sample(node),
            "(-1|1e400|18446744073709551616|null|\"7\"|true|\\[\\])",
            prop::sample::select(&["ts_ms", "interval_ms", "util_gpu", "util_mem", "mem_used"][..]),
        )
            .prop_map(move |(s, v, key)| {
                // A number the sample needs, replaced verbatim as a corrupt writer would.
                let mut value = serde_json::to_value(&s).unwrap();
                value[key] = serde_json::Value::Null;
                value
                    .to_string()
                    .replacen(&format!("\"{key}\":null"), &format!("\"{key}\":{v}"), 1)
            }),
    ]
}

proptest! {
    #![proptest_config(config(64))]

    /// Samples written by the node's spool are read back by the head as the same samples.
    #[test]
    fn spooled_samples_read_back((node, samples) in node_and_samples(12)) {
        let root = tempfile::tempdir().unwrap();
        let mut spool = NodeSpool::open(root.path(), &node).unwrap();
        let path = spool.write_batch(&samples).unwrap().unwrap();
        prop_assert_eq!(spool::ready_files(spool.dir()).unwrap(), vec![path.clone()]);
        let batch = spool::read_batch(&path, &node).unwrap();
        prop_assert!(batch.malformed.is_empty(), "{:?}", batch.malformed);
        prop_assert_eq!(batch.samples, samples);
    }

    /// One bad line among spooled samples (and blank lines anywhere) loses only itself, and
    /// is reported as `path:line: why`.
    #[test]
    fn a_bad_spool_line_loses_only_itself(
        (node, samples, bad) in node_and_samples(8)
            .prop_flat_map(|(n, s)| (Just(n.clone()), Just(s), bad_sample_line(n))),
        at in any::<prop::sample::Index>(),
        blanks in vec(any::<prop::sample::Index>(), 0..3),
    ) {
        let mut lines: Vec<String> = samples.iter().map(|s| serde_json::to_string(s).unwrap()).collect();
        let at = at.index(lines.len() + 1);
        lines.insert(at, bad.clone());
        let mut bad_number = at + 1;
        for b in blanks {
            let i = b.index(lines.len() + 1);
            lines.insert(i, " ".to_string());
            if i < bad_number {
                bad_number += 1;
            }
        }
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("batch.jsonl");
        fs::write(&path, lines.join("\n")).unwrap();
        let batch = spool::read_batch(&path, &node).unwrap();
        prop_assert_eq!(&batch.samples, &samples);
        prop_assert_eq!(batch.malformed.len(), 1, "{:?} for {}", batch.malformed, bad);
        let prefix = format!("{}:{bad_number}: ", path.display());
        prop_assert!(batch.malformed[0].starts_with(&prefix), "{:?}", batch.malformed);
    }

    /// The spool's node directories take only names that stay inside the root.
    #[test]
    fn spool_node_names_stay_inside_the_root(name in junk()) {
        if spool::check_node_name(&name).is_ok() {
            prop_assert!(!name.contains('/') && name != "." && name != ".." && !name.is_empty());
        }
    }

    /// No bytes panic the spool's reader (not UTF-8, NUL, JSON of any shape): every
    /// non-blank line is a sample or reported with its number, in order.
    #[test]
    fn spool_files_read_any_bytes(
        (node, samples) in node_and_samples(4),
        lines in vec(prop_oneof![
            vec(any::<u8>(), 0..40),
            soup().prop_map(String::into_bytes),
            "\\{[\"a-z_:, 0-9.\\-\\[\\]{}]{0,60}\\}?".prop_map(String::into_bytes),
        ], 0..6),
    ) {
        let mut bytes: Vec<u8> = Vec::new();
        for s in &samples {
            bytes.extend_from_slice(serde_json::to_string(s).unwrap().as_bytes());
            bytes.push(b'\n');
        }
        for l in &lines {
            bytes.extend_from_slice(l);
            bytes.push(b'\n');
        }
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("batch.jsonl");
        fs::write(&path, &bytes).unwrap();
        let batch = spool::read_batch(&path, &node).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        let non_blank: Vec<usize> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, _)| i + 1)
            .collect();
        prop_assert_eq!(batch.samples.len() + batch.malformed.len(), non_blank.len());
        prop_assert_eq!(&batch.samples[..samples.len()], &samples[..]);
        let at = format!("{}:", path.display());
        let mut numbers = Vec::new();
        for m in &batch.malformed {
            let rest = m.strip_prefix(&at).unwrap();
            let n: usize = rest.split(':').next().unwrap().parse().unwrap();
            prop_assert!(non_blank.contains(&n), "{}", m);
            numbers.push(n);
        }
        prop_assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{:?}", numbers);
    }
}

// ---------------------------------------------------------------------------------------------
// Times on the command line.

fn zone() -> impl Strategy<Value = FixedOffset> {
    (-14 * 4..=14 * 4i32).prop_map(|q| FixedOffset::east_opt(q * 900).unwrap())
}

proptest! {
    #![proptest_config(config(256))]

    /// A time written in Slurm's layout in a zone reads back as the same instant; a date
    /// reads as its midnight there.
    #[test]
    fn times_read_back(t in -2_000_000_000i64..8_000_000_000, tz in zone(), now in 0i64..4_000_000_000) {
        let local = tz.timestamp_opt(t, 0).unwrap();
        let text = local.format("%Y-%m-%dT%H:%M:%S").to_string();
        prop_assert_eq!(period::parse_local_datetime(&text, &tz), Ok(t));
        prop_assert_eq!(period::parse_time_arg(&format!(" {text} "), now, &tz), Ok(t));
        let date = local.format("%Y-%m-%d").to_string();
        let midnight = tz
            .from_local_datetime(&local.date_naive().and_hms_opt(0, 0, 0).unwrap())
            .unwrap()
            .timestamp();
        prop_assert_eq!(period::parse_time_arg(&date, now, &tz), Ok(midnight));
    }

    /// `now-<duration>` and `now+<duration>` are `now` moved by the duration, its units
    /// written in any of the documented ways.
    #[test]
    fn relative_times_move_now(
        (d, h, m, s) in (0u64..1000, 0u64..24, 0u64..60, 0u64..60),
        now in 0i64..4_000_000_000,
        plus in any::<bool>(),
        tz in zone(),
    ) {
        let mut text = String::new();
        for (n, unit) in [(d, "d"), (h, "h"), (m, "m"), (s, "s")] {
            if n > 0 {
                text.push_str(&format!("{n}{unit}"));
            }
        }
        if text.is_empty() {
            text.push('0');
        }
        let secs = (d * 86_400 + h * 3600 + m * 60 + s) as i64;
        let (arg, want) = if plus {
            (format!("now+{text}"), now + secs)
        } else {
            (format!("now-{text}"), now - secs)
        };
        prop_assert_eq!(period::parse_time_arg(&arg, now, &tz), Ok(want), "{}", arg);
        prop_assert_eq!(period::parse_time_arg(" now ", now, &tz), Ok(now));
    }

    /// No text panics the command line's times (huge numbers, years past 9999, bad dates).
    #[test]
    fn any_time_argument_is_read_or_refused(
        text in prop_oneof![
            junk(),
            "now[+-][0-9]{0,25}[a-z ]{0,3}([0-9]{0,20}[a-z]{0,2}){0,3}",
            "[+-]?[0-9]{1,7}-[0-9]{1,3}-[0-9]{1,3}(T[0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3})?",
        ],
        now in prop_oneof![Just(i64::MIN), Just(i64::MAX), any::<i64>(), 0i64..4_000_000_000],
        tz in zone(),
    ) {
        let _ = period::parse_time_arg(&text, now, &tz);
        let _ = period::parse_local_datetime(&text, &tz);
        let _ = accountd::sample::parse_interval(&text);
    }
}
