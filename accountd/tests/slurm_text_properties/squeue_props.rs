//! squeue: the governor's reader.

use super::*;

/// "Now" of the squeue properties: 2026-11-30T03:17:00Z.
pub(crate) const NOW: i64 = 1_796_008_620;

/// A job as the generator writes it into squeue's fields, and as the governor must read it.
#[derive(Debug, Clone)]
pub(crate) struct SqueueJob {
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
    /// The node list as written, and the names it stands for: a running job's NodeList, a
    /// pending job's SchedNodes where `reserved`.
    node_list: (String, Vec<String>),
    /// A pending job backfill reserved nodes for.
    reserved: bool,
    eligible_time: Option<i64>,
    comment: String,
}

pub(crate) const STATES: [&str; 4] = ["PENDING", "RUNNING", "COMPLETING", "SUSPENDED"];
pub(crate) const REASONS: [&str; 9] = [
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
pub(crate) fn host_list() -> impl Strategy<Value = (String, Vec<String>)> {
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

pub(crate) fn squeue_job() -> impl Strategy<Value = SqueueJob> {
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
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (id, account, state, priority, (submit, start, eligible_time)),
                (gpus, per_node, gpu_type, nodes),
                (reason, batch, node_list, comment, reserved),
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
                reserved,
                eligible_time,
                comment,
            },
        )
}

/// The job's line as `squeue -O JobID:|,Account:|,...,admin_comment:|` prints it.
pub(crate) fn squeue_line(j: &SqueueJob) -> String {
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
        if !running && j.reserved {
            j.node_list.0.clone()
        } else {
            "(null)".into()
        },
        j.comment.clone(),
    ];
    format!("{}|\n", fields.join("|"))
}

/// The job the governor must read from [`squeue_line`], by the rules of `squeue::read_squeue`'s
/// documentation, written out here.
pub(crate) fn expected_job(j: &SqueueJob) -> ClusterJob {
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
        nodes: if running || j.reserved {
            j.node_list.1.clone()
        } else {
            Vec::new()
        },
        node_count: j.nodes,
        completing: j.state == "COMPLETING",
        tasks: 1,
    }
}

/// The record libslurm gives for the job [`squeue_line`] writes: typed fields, NULL strings
/// empty, no `N/A`.
pub(crate) fn typed_record(j: &SqueueJob, number: usize) -> squeue::JobRecord {
    let running = j.state != "PENDING";
    let typed = j
        .gpu_type
        .as_ref()
        .map_or(String::new(), |t| format!(":{t}"));
    let ask = format!("gres:gpu{typed}:{}", j.gpus);
    let mut alloc = format!(
        "cpu={},mem=1G,node={},gres/gpu={}",
        j.nodes, j.nodes, j.gpus
    );
    if let Some(t) = j.gpu_type.as_ref().filter(|_| j.gpus > 0) {
        alloc.push_str(&format!(",gres/gpu:{t}={}", j.gpus));
    }
    let (per_job, per_node) = match (running, j.per_node) {
        (true, _) => (None, Some(format!("gres:gpu:{}", j.gpus))),
        (false, true) => (None, Some(ask)),
        (false, false) => (Some(ask), None),
    };
    squeue::JobRecord {
        id: j.id,
        account: j.account.clone(),
        state: squeue::JobState::from_name(j.state),
        priority: Some(j.priority),
        submit: Some(j.submit),
        start: j.start,
        tres_alloc: if running { alloc } else { "N/A".into() },
        ask: accountd::job_record::TresAsk {
            per_job,
            per_node,
            ..Default::default()
        },
        num_nodes: Some(j.nodes),
        num_tasks: Some(j.nodes),
        reason: j.reason.into(),
        batch: j.batch,
        node_list: if running {
            j.node_list.0.clone()
        } else {
            String::new()
        },
        eligible_time: j.eligible_time,
        array_job_id: None,
        array_task: None,
        whole_node: false,
        het: None,
        sched_nodes: if !running && j.reserved {
            j.node_list.0.clone()
        } else {
            String::new()
        },
        admin_comment: j.comment.clone(),
        gres_detail: Vec::new(),
        origin: accountd::job_record::Origin::Record(number),
    }
}

/// Jobs of distinct ids (an array's pending tasks share an id and are read once).
pub(crate) fn squeue_jobs(max: usize) -> impl Strategy<Value = Vec<SqueueJob>> {
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
        squeue::pending_reasons(&squeue::squeue_records(&text));
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
        let reasons = squeue::pending_reasons(&squeue::squeue_records(&text));
        let pending: BTreeMap<u64, String> = jobs
            .iter()
            .filter(|j| j.state == "PENDING")
            .map(|j| (j.id, j.reason.to_string()))
            .collect();
        prop_assert_eq!(reasons, pending);
    }

    /// The typed records libslurm gives (issue 26: no text between Slurm and the reader) read
    /// as the same jobs, holds and reasons as squeue's lines of the same jobs.
    #[test]
    fn typed_records_read_as_their_squeue_lines(jobs in squeue_jobs(8), node_gpus in 0u32..16) {
        let text: String = jobs.iter().map(squeue_line).collect();
        let from_text = squeue::squeue_records(&text);
        let typed = squeue::Records {
            items: jobs.iter().enumerate().map(|(i, j)| Ok(typed_record(j, i + 1))).collect(),
        };
        let (a, b) = (
            squeue::read_records(&typed, NOW, node_gpus),
            squeue::read_records(&from_text, NOW, node_gpus),
        );
        prop_assert!(a.unreadable.is_empty(), "{:?}", a.unreadable);
        prop_assert_eq!(&a.jobs, &b.jobs);
        let want: Vec<ClusterJob> = jobs.iter().map(expected_job).collect();
        prop_assert_eq!(a.jobs, want);
        prop_assert_eq!(squeue::pending_reasons(&typed), squeue::pending_reasons(&from_text));
        prop_assert_eq!(squeue::governor_holds(&typed), squeue::governor_holds(&from_text));
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
pub(crate) fn samples<S: Strategy>(strategy: S, count: usize) -> Vec<S::Value> {
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
