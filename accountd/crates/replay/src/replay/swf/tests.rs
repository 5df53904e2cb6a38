//! The SWF reader and the team map, on hand-written excerpts.

use super::mapper::cluster;
use super::*;

const MAP: &str = "\
# the test site
group 12 = training   # the training group
user 7 = agents
queue 3 = class:inference
default = research
gpus_per_proc = 1
";

/// A hand-written excerpt in the PWA's layout.
const SWF: &str = "\
; Version: 2.2
; Computer: test cluster
; Installation: nowhere
; UnixStartTime: 1700000000
; TimeZoneString: UTC
; MaxNodes: 4
; MaxProcs: 32
; Note: a hand-written excerpt
;
1        0     10   3600   8  -1 -1   8   7200 -1 1  7 12 -1  1 -1 -1 -1
2       60     -1     -1   4  -1 -1   4   3600 -1 0  3 12 -1  1 -1 -1 -1
3      120    300      0   2  -1 -1   2   1800 -1 5  9 99 -1  3 -1 -1 -1
4      180    100    500  -1  -1 -1  16     -1 -1 1  9 99 -1  3 -1  1 60
5      240     -1     -1   1  -1 -1   1     -1 -1 5  9 99 -1  1 -1 -1 -1
6      300      0   2000   4  -1 -1   4   1000 -1 1  9 99 -1  1 -1 -1 -1
";

fn map() -> TeamMap {
    parse_team_map(MAP, "map.txt").unwrap()
}

#[test]
fn the_team_map_reads_every_entry() {
    let m = map();
    assert_eq!(m.groups.get(&12).map(String::as_str), Some("training"));
    assert_eq!(m.users.get(&7).map(String::as_str), Some("agents"));
    assert_eq!(m.queues.get(&3).map(String::as_str), Some("inference"));
    assert_eq!(m.default_team.as_deref(), Some("research"));
    assert_eq!(m.procs, ProcUnit::GpusPerProc(1));
    assert_eq!(m.gpus_per_node, 8);
    // A user's mapping wins over its group's; then the default.
    assert_eq!(m.team(Some(7), Some(12)), Some("agents"));
    assert_eq!(m.team(Some(8), Some(12)), Some("training"));
    assert_eq!(m.team(None, None), Some("research"));
    assert_eq!(m.class(Some(3)), Some("inference"));
    assert_eq!(m.class(Some(1)), None);
    let m = parse_team_map("procs_per_gpu = 8\ndefault_class = class:standard\n", "m").unwrap();
    assert_eq!(m.procs.gpus(9), Some(2));
    assert_eq!(m.class(None), Some("standard"));
    assert_eq!(m.team(Some(1), None), None);
}

#[test]
fn team_map_errors_say_where_and_how() {
    let cases = [
        ("group 12 training", 1, "no `=`"),
        ("\n\nuser x = a", 3, "user id `x` is not a whole number"),
        ("queue 3 = inference", 1, "not to a class"),
        ("user 3 = class:x", 1, "maps to a class"),
        ("colour = red", 1, "unknown entry `colour`"),
        ("user 1 = a\nuser 1 = b", 2, "given twice (first on line 1)"),
        ("gpus_per_node = 0", 1, "not a whole number above 0"),
        (
            "gpus_per_proc = 2\nprocs_per_gpu = 4",
            2,
            "both say what a processor is",
        ),
        ("default = two words", 1, "no spaces"),
        ("group 1 = a,b", 1, "`,` cannot be in a team"),
        ("user = a", 1, "without an id"),
        ("default =", 1, "nothing after `=`"),
    ];
    for (text, line, want) in cases {
        let e = parse_team_map(text, "map.txt").unwrap_err();
        assert_eq!(e.line, line, "{text}: {e}");
        let s = e.to_string();
        assert!(s.starts_with(&format!("map.txt:{line}: ")), "{s}");
        assert!(s.contains(want), "{text}: {s}");
        assert!(s.contains("(hint: "), "{s}");
    }
}

#[test]
fn an_excerpt_becomes_a_trace() {
    let (trace, s) = load(SWF, &map(), None).unwrap();
    let base = 1_700_000_000;
    assert_eq!(s.header.unix_start_time, Some(base));
    assert_eq!(s.header.max_procs, Some(32));
    assert_eq!(s.header.version.as_deref(), Some("2.2"));
    assert_eq!(
        s.header.text.get("Computer").map(String::as_str),
        Some("test cluster")
    );
    assert_eq!(
        (s.capacity, s.capacity_source),
        (32, CapacitySource::MaxProcs)
    );
    assert_eq!(trace.cluster.nodes.len(), 4);
    assert!(trace.cluster.nodes.iter().all(|n| n.gpus == 8));
    assert_eq!(s.records, 6);
    // Job 5: cancelled before it started, at an unknown time: skipped.
    assert_eq!(s.cancelled_unknown, 1);
    assert_eq!(s.jobs, 5);
    let ids: Vec<u64> = trace.jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 6]);

    let j1 = &trace.jobs[0];
    assert_eq!(j1.team, "agents"); // user 7 over group 12
    assert_eq!((j1.submit, j1.eligible), (base, base));
    assert_eq!(
        (j1.gpus, j1.nodes, j1.time_limit, j1.work),
        (8, 1, 7200, 3600)
    );
    assert_eq!(j1.observed.runs, [(base + 10, Some(base + 3610))]);
    assert_eq!(j1.class, None);

    // Job 2: wait and run unknown (it failed, as far as anyone knows): it needs its limit.
    let j2 = &trace.jobs[1];
    assert_eq!(j2.team, "training");
    assert_eq!((j2.work, j2.time_limit), (3600, 3600));
    assert!(j2.observed.runs.is_empty());
    assert_eq!(j2.cancelled_pending_at, None);
    assert!(
        j2.observed.wait_unknown,
        "a wait of -1 is unknown, not a wait"
    );
    assert_eq!((s.wait_unknown, s.run_unknown), (1, 1));

    // Job 3: cancelled after 300 s in the queue; its queue is the inference class.
    let j3 = &trace.jobs[2];
    assert_eq!(j3.team, "research");
    assert_eq!(j3.class.as_deref(), Some("inference"));
    assert_eq!(j3.cancelled_pending_at, Some(base + 120 + 300));
    assert!(j3.observed.runs.is_empty());
    assert_eq!(s.cancelled_pending, 1);

    // Job 4: requested processors (allocated unknown), two nodes, limit from its run,
    // eligible 60 s after job 1 ended (later than its submission).
    let j4 = &trace.jobs[3];
    assert_eq!((j4.gpus, j4.nodes), (16, 2));
    assert_eq!((j4.time_limit, j4.work), (500, 500));
    assert_eq!(j4.eligible, base + 3610 + 60);
    assert_eq!(j4.observed.runs, [(base + 280, Some(base + 780))]);
    assert_eq!((s.dependencies, s.dependencies_unresolved), (1, 0));
    assert_eq!(s.limit_from_run, 1);

    // Job 6 ran 2000 s on a 1000 s limit: its limit is its run.
    let j6 = &trace.jobs[4];
    assert_eq!(j6.time_limit, 2000);
    assert_eq!(s.overran_limit, 1);

    assert_eq!(trace.since, base);
    // Job 2 (no observed run) ends last: eligible at 60, 3600 s of work.
    assert_eq!(trace.until, base + 60 + 3600);
    assert_eq!(s.teams.get("research"), Some(&3));
    assert_eq!(trace.source, "SWF file");
}

#[test]
fn capacity_from_the_caller_or_max_nodes_or_an_error() {
    let (trace, s) = load(SWF, &map(), Some(20)).unwrap();
    assert_eq!((s.capacity, s.capacity_source), (20, CapacitySource::Given));
    let gpus: Vec<u32> = trace.cluster.nodes.iter().map(|n| n.gpus).collect();
    assert_eq!(gpus, [8, 8, 4]);
    assert_eq!(s.larger_than_cluster, 0);
    let (_, s) = load(SWF, &map(), Some(10)).unwrap();
    assert_eq!(s.larger_than_cluster, 1); // job 4's 16 GPUs

    let no_procs = SWF.replace("; MaxProcs: 32\n", "");
    let (_, s) = load(&no_procs, &map(), None).unwrap();
    assert_eq!(
        (s.capacity, s.capacity_source),
        (4, CapacitySource::MaxNodes)
    );
    let neither = no_procs.replace("; MaxNodes: 4\n", "");
    assert!(matches!(
        load(&neither, &map(), None),
        Err(SwfError::NoCapacity)
    ));
    assert!(load(&neither, &map(), Some(64)).is_ok());
    // A CPU-core trace: 8 processors a GPU.
    let cpu = parse_team_map("procs_per_gpu = 8\ndefault = research", "m").unwrap();
    let (trace, s) = load(SWF, &cpu, None).unwrap();
    assert_eq!(s.capacity, 4);
    assert_eq!(trace.jobs[0].gpus, 1);
    assert_eq!(trace.jobs[3].gpus, 2);
}

#[test]
fn without_start_time_the_trace_starts_at_its_first_job() {
    let text = SWF.replace("; UnixStartTime: 1700000000\n", "");
    let (trace, s) = load(&text, &map(), None).unwrap();
    assert_eq!(s.header.unix_start_time, None);
    assert_eq!(trace.since, 0);
    assert_eq!(trace.jobs[0].submit, 0);
}

#[test]
fn a_header_cluster_too_large_to_hold_is_an_error_not_half_a_billion_nodes() {
    // 4e9 processors, one GPU each: 500 million nodes of 8 if it were taken.
    let huge = SWF.replace("; MaxProcs: 32", "; MaxProcs: 4000000000");
    let e = load(&huge, &map(), None).unwrap_err();
    assert!(matches!(e, SwfError::Header { line: 7, .. }), "{e}");
    assert!(
        e.to_string().contains("more than a replay takes (1000000)"),
        "{e}"
    );
    // The largest cluster taken is taken.
    let largest = SWF.replace("; MaxProcs: 32", &format!("; MaxProcs: {MAX_CLUSTER_GPUS}"));
    let (trace, _) = load(&largest, &map(), None).unwrap();
    let gpus: u32 = trace.cluster.nodes.iter().map(|n| n.gpus).sum();
    assert_eq!(gpus, MAX_CLUSTER_GPUS);
}

#[test]
fn header_errors_fail_with_the_line() {
    let bad = SWF.replace("; MaxProcs: 32", "; MaxProcs: many");
    let e = load(&bad, &map(), None).unwrap_err();
    assert!(matches!(e, SwfError::Header { line: 7, .. }), "{e}");
    assert!(
        e.to_string().contains("MaxProcs `many` is not a number"),
        "{e}"
    );
    let twice = SWF.replace("; Note:", "; UnixStartTime: 5\n; Note:");
    let e = load(&twice, &map(), None).unwrap_err();
    assert!(
        e.to_string().contains("differs from line 4's 1700000000"),
        "{e}"
    );
    // Free text with colons is not a header key.
    let prose = format!("; Conversion: by hand: see the note\n; see: here and there\n{SWF}");
    assert!(load(&prose, &map(), None).is_ok());
}

#[test]
fn malformed_job_lines_are_skipped_counted_and_listed() {
    let text = format!(
        "{SWF}7 1 2 3\n8 400 0 10 1 -1 -1 1 10 -1 1 x 1 -1 1 -1 -1 -1\n\
         9 400 0 10 1 -1 -1 1 10 -1 1 -5 1 -1 1 -1 -1 -1\n\
         1 400 0 10 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n\
         10 400.4 0 10.6 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n"
    );
    let (trace, s) = load(&text, &map(), None).unwrap();
    assert_eq!(s.malformed, 4);
    let reasons: Vec<String> = s.malformed_first.iter().map(|m| m.to_string()).collect();
    assert!(
        reasons[0].starts_with("SWF line 16: expected 18 whitespace-separated fields, found 4"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("user id `x` is not a number"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].contains("user id `-5` is negative"),
        "{reasons:?}"
    );
    assert!(
        reasons[3].contains("job number 1 is also on line 10"),
        "{reasons:?}"
    );
    // Decimals are rounded.
    let j10 = trace.jobs.iter().find(|j| j.id == 10).unwrap();
    assert_eq!((j10.submit - 1_700_000_000, j10.work), (400, 11));
    // Only the first few are listed.
    let many = format!("{SWF}{}", "garbage\n".repeat(20));
    let (_, s) = load(&many, &map(), None).unwrap();
    assert_eq!(
        (s.malformed, s.malformed_first.len()),
        (20, MALFORMED_LISTED)
    );
}

#[test]
fn not_swf_at_all_is_an_error() {
    let e = load("JobID|User\n1|alice\n", &map(), Some(8)).unwrap_err();
    assert!(matches!(e, SwfError::NoJobs { malformed: 2, .. }), "{e}");
    assert!(e.to_string().contains("SWF line 1: expected 18"), "{e}");
    assert!(matches!(
        load("; only a header\n", &map(), Some(8)),
        Err(SwfError::NoJobs { malformed: 0, .. })
    ));
}

#[test]
fn unmapped_jobs_are_skipped_unless_nothing_maps() {
    let m = parse_team_map("group 12 = training", "m").unwrap();
    let (trace, s) = load(SWF, &m, None).unwrap();
    assert_eq!(s.jobs, 2); // jobs 1 and 2, of group 12
    assert_eq!(s.unmapped, 4);
    assert_eq!(s.unmapped_users.get(&Some(9)), Some(&4));
    assert!(trace.jobs.iter().all(|j| j.team == "training"));
    let m = parse_team_map("group 1000 = training", "m").unwrap();
    let e = load(SWF, &m, None).unwrap_err();
    assert!(matches!(e, SwfError::NothingMapped { jobs: 6 }), "{e}");
}

#[test]
fn partial_executions_leave_the_summary_line() {
    let text = "; MaxProcs: 8\n\
        1 0 10 100 2 -1 -1 2 500 -1 1 1 1 -1 1 -1 -1 -1\n\
        1 0 10 40 2 -1 -1 2 500 -1 2 1 1 -1 1 -1 -1 -1\n\
        1 0 80 60 2 -1 -1 2 500 -1 3 1 1 -1 1 -1 -1 -1\n\
        2 5 0 0 0 -1 -1 -1 500 -1 1 1 1 -1 1 -1 -1 -1\n\
        3 5 0 -1 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1\n\
        4 9 0 10 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 77 30\n";
    let m = parse_team_map("default = t", "m").unwrap();
    let (trace, s) = load(text, &m, None).unwrap();
    assert_eq!(s.partial_records, 2);
    assert_eq!(s.no_size, 1); // job 2: no processors
    assert_eq!(s.no_duration, 1); // job 3: neither run nor requested time
    assert_eq!(s.dependencies_unresolved, 1); // job 4's job 77 is not in the trace
    assert_eq!(s.malformed, 0);
    let ids: Vec<u64> = trace.jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, [1, 4]);
    assert_eq!(trace.jobs[0].work, 100);
    assert_eq!(trace.jobs[1].eligible, 9);
}

#[test]
fn cluster_nodes_take_the_remainder() {
    let c = cluster(1000, 8);
    assert_eq!(c.nodes.len(), 125);
    assert_eq!(c.nodes[124].name, "swf-0125");
    let c = cluster(10, 4);
    let g: Vec<u32> = c.nodes.iter().map(|n| n.gpus).collect();
    assert_eq!(g, [4, 4, 2]);
}

#[test]
fn values_no_cluster_has_are_refused_by_line_and_every_skip_is_counted_under_its_reason() {
    let huge = "1000000000000000000";
    let text = format!(
        "{SWF}\
         11 {huge} 0 10 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n\
         12 400 0 {huge} 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n\
         13 400 0 10 {huge} -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n\
         -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1\n"
    );
    let (trace, s) = load(&text, &map(), None).unwrap();
    // The excerpt's 5 jobs (its job 5 was cancelled at an unknown time), none of the four
    // lines; the period is the excerpt's, not 1.16e13 days.
    assert_eq!(trace.jobs.len(), 5);
    assert!(trace.until - trace.since < 86_400, "{}", trace.until);
    assert_eq!(s.malformed, 4);
    let reasons: Vec<String> = s.malformed_first.iter().map(|m| m.to_string()).collect();
    assert!(
        reasons[0].starts_with(&format!(
            "SWF line 16: submit time {huge} s is more than 50 years"
        )),
        "{reasons:?}"
    );
    assert!(
        reasons[1].starts_with("SWF line 17: run time"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].starts_with(&format!("SWF line 18: allocated processors {huge} is more")),
        "{reasons:?}"
    );
    assert!(
        reasons[3].starts_with("SWF line 19: job number unknown"),
        "{reasons:?}"
    );
    // The notes: every job line is in the jobs or under one reason (5 + 4 malformed + job 5
    // cancelled at an unknown time = 10 lines), then the listed lines.
    let notes = s.notes("SWF file t.swf");
    assert_eq!(
        notes[0],
        "SWF file t.swf: 5 jobs of 10 job lines; skipped: 4 malformed, 1 cancelled at an unknown time"
    );
    assert_eq!(notes.len(), 1 + 4);
    assert!(notes[1].starts_with("SWF line 16"), "{notes:?}");
    // The largest values a real machine can log are kept.
    let edge = format!(
        "{SWF}14 400 0 {} 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n",
        MAX_SECS
    );
    let (_, s) = load(&edge, &map(), None).unwrap();
    assert_eq!(s.malformed, 0);
    // The header's time 0 too.
    let late = SWF.replace(
        "UnixStartTime: 1700000000",
        &format!("UnixStartTime: {huge}"),
    );
    let e = load(&late, &map(), None).unwrap_err();
    assert!(
        e.to_string()
            .contains("line 4: UnixStartTime 1000000000000000000 is after the year 2200"),
        "{e}"
    );
}
