//! The squeue reader's unit tests (apart, so that squeue.rs stays under 1,000 lines).

use super::*;

const SQUEUE: &str = "\
6|training|RUNNING|640000640|2026-11-30T03:13:02|2026-11-30T03:15:04|cpu=1,node=1,billing=1,gres/gpu=1|N/A|gres:gpu:1|N/A|1|1|None|1|n1|2026-11-30T03:16:00|6|N/A|N/A|*|OK|N/A|N/A|(null)|
9|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|gres:gpu:2|N/A|N/A|1|1|Priority|1|n1|2026-11-30T03:16:00|9|N/A|N/A|*|OK|N/A|N/A|(null)|
10|research|PENDING|64000|2026-11-30T03:16:01|2026-11-30T03:20:00|N/A|N/A|gres/gpu:1|N/A|2|2|BeginTime|1|n1|2026-11-30T03:20:00|10|N/A|N/A|*|OK|N/A|N/A|(null)|
11|research|PENDING|64000|2026-11-30T03:16:02|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|Resources|1|n1|2026-11-30T03:16:00|11|1-3|N/A|*|OK|N/A|N/A|(null)|
11|research|PENDING|64000|2026-11-30T03:16:02|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|Resources|1|n1|2026-11-30T03:16:00|11|4-5|N/A|*|OK|N/A|N/A|(null)|
12|agents|COMPLETED|64000|2026-11-30T03:16:02|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|None|1|n1|2026-11-30T03:16:00|12|N/A|N/A|*|OK|N/A|N/A|(null)|
13|agents|RUNNING|640000640|2026-11-30T03:13:02|2026-11-30T03:15:04|cpu=1,node=1,billing=1,gres/gpu=1|N/A|gres:gpu:1|N/A|1|1|None|0|n1|2026-11-30T03:16:00|13|N/A|N/A|*|OK|N/A|N/A|(null)|
";

#[test]
fn squeue_lines_become_jobs_with_their_gpus() {
    // 03:17:00 UTC on the day of the sample.
    let (jobs, unreadable) = parse_squeue(SQUEUE, 1_796_008_620);
    assert!(unreadable.is_empty(), "{unreadable:?}");
    let ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, [6, 9, 10, 11, 13]);
    // salloc/srun allocations are not batch jobs: they can only be cancelled.
    assert!(jobs[0].batch && !jobs[4].batch);
    assert_eq!(jobs[0].phase, Phase::Running);
    assert_eq!(jobs[0].start, Some(1_796_008_504));
    assert_eq!(jobs[1].gpus, 2);
    // Per-node request on 2 nodes; a pending job's expected start is not a start.
    assert_eq!((jobs[2].gpus, jobs[2].start), (2, None));
    // Waiting for its begin time: GPUs given to research would not start it.
    assert!(!jobs[2].eligible && jobs[1].eligible && jobs[0].eligible);
}

#[test]
fn pending_jobs_carry_slurms_reason_by_the_id_the_jobs_are_read_with() {
    let reasons = pending_reasons(&squeue_records(SQUEUE));
    let (jobs, _) = parse_squeue(SQUEUE, 1_796_008_620);
    let pending: Vec<u64> = jobs
        .iter()
        .filter(|j| j.phase == Phase::Pending)
        .map(|j| j.id)
        .collect();
    assert_eq!(pending, vec![9, 10, 11]);
    // Running and ended jobs have none; an array's pending record is one job.
    assert_eq!(
        reasons,
        BTreeMap::from([
            (9, "Priority".to_string()),
            (10, "BeginTime".to_string()),
            (11, "Resources".to_string()),
        ])
    );
    // A line too short to read gives no reason (and no job).
    assert!(pending_reasons(&squeue_records("14|agents|PENDING|1|x\n")).is_empty());
}

#[test]
fn array_records_count_their_tasks_and_are_named_so_that_no_other_task_is_touched() {
    let line = |id: &str, state: &str, array: &str, task: &str| {
        let start = if state == "RUNNING" {
            "2026-11-30T03:15:04"
        } else {
            "N/A"
        };
        format!(
            "{id}|research|{state}|64000|2026-11-30T03:13:02|{start}|cpu=1,gres/gpu=1|N/A|gres:gpu:1|N/A|1|1|None|1|n1|2026-11-30T03:16:00|{array}|{task}|N/A|*|OK|N/A|N/A|(null)|\n"
        )
    };
    let text = [
        line("50", "RUNNING", "49", "1"),
        line("49", "PENDING", "49", "2-10%3"),
        line("51", "RUNNING", "51", "7"),
        line("52", "PENDING", "52", "0-12:4"),
        line("53", "PENDING", "53", "1-x"),
        line("54", "PENDING", "54", "N/A"),
        line("56", "PENDING", "55", "1-4%2"),
        line("57", "RUNNING", "55", "5"),
        line("58", "RUNNING", "55", "6"),
    ]
    .concat();
    let SqueueRead {
        jobs,
        unreadable,
        addresses,
        ..
    } = read_squeue(&text, 1_796_008_620, 4);
    let tasks: BTreeMap<u64, (u32, bool)> =
        jobs.iter().map(|j| (j.id, (j.tasks, j.eligible))).collect();
    // 9 pending tasks, throttled to 3 at once with one running: 2 may start.
    assert_eq!(tasks[&49], (2, true));
    assert_eq!(tasks[&52], (4, true));
    // Unreadable: one task, and never named to Slurm.
    assert_eq!(tasks[&53].0, 1);
    assert_eq!(unreadable.len(), 1, "{unreadable:?}");
    // Throttled to 2 with 2 running: none may start now.
    assert_eq!(tasks[&56], (1, false));
    let name = |id| address(&addresses, id);
    assert_eq!(name(50).as_deref(), Some("49_1"));
    assert_eq!(name(49).as_deref(), Some("49_[2-10]"));
    // A task that carries its array's own id: `51` alone would name every task of 51.
    assert_eq!(name(51).as_deref(), Some("51_7"));
    assert_eq!(name(52).as_deref(), Some("52_[0,4,8,12]"));
    assert_eq!(name(53), None);
    assert_eq!(name(54).as_deref(), Some("54"));
}

#[test]
fn finding2_no_line_a_user_can_write_fails_the_pass() {
    let text = "\
6|training|RUNNING|x|2026-11-30T03:13:02|N/A|cpu=1,gres/gpu=1|N/A|N/A|N/A|1|1|None|1|n1|2026-11-30T03:16:00|6|N/A|N/A|*|OK|N/A|N/A|(null)|
7|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1t|N/A|1|1|Priority|1|n1|2026-11-30T03:16:00|7|N/A|N/A|*|OK|N/A|N/A|(null)|
8|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:h100:x:2|N/A|1|1|Priority|1|n1|2026-11-30T03:16:00|8|N/A|N/A|*|OK|N/A|N/A|(null)|
1|2|3
x|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|Priority|1|n1|
9|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|gres:gpu:1|N/A|N/A|1|1|Priority|1|n1|2026-11-30T03:16:00|9|N/A|N/A|*|OK|N/A|N/A|(null)|
";
    let (jobs, unreadable) = parse_squeue(text, 0);
    let ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, [6, 7, 8, 9]);
    // The running job is kept (its priority is unreadable, not its GPUs).
    assert_eq!((jobs[0].gpus, jobs[0].priority), (1, 1));
    // 1t is 2^40 GPUs: far beyond any team; a malformed type cannot be read: never fitting.
    assert_eq!(jobs[1].gpus, governance::UNREADABLE_GPUS);
    assert_eq!(jobs[2].gpus, governance::UNREADABLE_GPUS);
    assert_eq!(jobs[3].gpus, 1);
    let lines: Vec<usize> = unreadable.iter().map(|u| u.line_number).collect();
    assert_eq!(lines, [1, 3, 4, 5], "{unreadable:?}");
    assert!(unreadable[0].to_string().contains("line 1: bad priority"));
}

#[test]
fn finding5_a_job_whose_eligible_time_has_not_come_cannot_start_whatever_its_reason() {
    // Slurm resets the reason to None when the governor updates a job's priority: the
    // eligible time decides (the begin time, N/A while a dependency is unmet).
    let text = "\
20|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|None|1|(null)|2026-11-30T04:16:00|20|N/A|N/A|*|OK|N/A|N/A|(null)|
21|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|None|1|(null)|N/A|21|N/A|N/A|*|OK|N/A|N/A|(null)|
22|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|None|1|(null)|2026-11-30T03:16:00|22|N/A|N/A|*|OK|N/A|N/A|(null)|
23|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|None|1|(null)|2027-11-30T03:16:00|23|N/A|N/A|*|OK|N/A|N/A|(null)|
";
    let (jobs, _) = parse_squeue(text, 1_796_008_620);
    let eligible: Vec<bool> = jobs.iter().map(|j| j.eligible).collect();
    assert_eq!(eligible, [false, false, true, false]);
    // A year ahead is teamshare's parking.
    let parked: Vec<bool> = jobs.iter().map(|j| j.parked).collect();
    assert_eq!(parked, [false, false, false, true]);
}

#[test]
fn finding4_teamshare_holds_are_told_from_other_holds() {
    // now = 2026-11-30T03:16:40
    let text = "\
30|agents|PENDING|0|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|JobHeldAdmin|1|(null)|2027-11-30T03:16:00|30|N/A|N/A|*|OK|N/A|N/A|(null)|teamshare: parked: its priority class may not borrow|
31|agents|PENDING|0|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|JobHeldAdmin|1|(null)|2026-11-30T03:16:00|31|N/A|N/A|*|OK|N/A|N/A|(null)|teamshare: parked: a|b|c|
32|agents|PENDING|0|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|JobHeldUser|1|(null)|2026-11-30T03:16:00|32|N/A|N/A|*|OK|N/A|N/A|(null)|
33|agents|PENDING|0|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|JobHeldAdmin|1|(null)|2026-11-30T03:16:00|33|N/A|N/A|*|OK|N/A|N/A|(null)|maintenance: see the admins|
34|agents|PENDING|5|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|None|1|(null)|2026-11-30T03:16:00|34|N/A|N/A|*|OK|N/A|N/A|(null)|teamshare: parked: stale mark|
35|agents|PENDING|0|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|JobHeldAdmin|1|(null)|N/A|35|N/A|N/A|*|OK|N/A|N/A|(null)|teamshare: parked: waits on a dependency|
";
    let (jobs, unreadable) = parse_squeue(text, 1_796_008_600);
    assert!(unreadable.is_empty(), "{unreadable:?}");
    let held: Vec<bool> = jobs.iter().map(|j| j.park_held).collect();
    assert_eq!(held, [true, true, false, false, false, true]);
    // Held by teamshare, a job's begin time says whether it could start once released;
    // any other hold makes it ineligible.
    let eligible: Vec<bool> = jobs.iter().map(|j| j.eligible).collect();
    assert_eq!(eligible, [false, true, false, false, true, false]);
    assert!(jobs[0].parked && !jobs[1].parked);
}

#[test]
fn jobs_carry_the_one_gpu_type_they_hold_or_ask_for() {
    // Lines as squeue prints them on the dev cluster with GPU_TYPES="h100 h100 a100":
    // the allocation of an untyped request names the type it got (job 2).
    let text = "\
1|acme|RUNNING|1|2026-11-30T03:13:02|2026-11-30T03:15:04|cpu=1,node=1,billing=1,gres/gpu=1,gres/gpu:h100=1|N/A|gres:gpu:h100:1|N/A|1|1|None|1|n1|2026-11-30T03:16:00|1|N/A|N/A|*|OK|N/A|N/A|(null)|
2|acme|RUNNING|1|2026-11-30T03:13:02|2026-11-30T03:15:04|cpu=1,node=1,billing=1,gres/gpu=1,gres/gpu:a100=1|N/A|gres:gpu:1|N/A|1|1|None|1|n3|2026-11-30T03:16:00|2|N/A|N/A|*|OK|N/A|N/A|(null)|
3|acme|PENDING|1|2026-11-30T03:16:00|N/A|N/A|gres:gpu:h100:2|N/A|N/A|1|1|Priority|1|n1|2026-11-30T03:16:00|3|N/A|N/A|*|OK|N/A|N/A|(null)|
4|acme|PENDING|1|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:2|N/A|1|1|Priority|1|n1|2026-11-30T03:16:00|4|N/A|N/A|*|OK|N/A|N/A|(null)|
5|acme|PENDING|1|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:h100:1,gres:gpu:a100:1|N/A|1|1|Priority|1|n1|2026-11-30T03:16:00|5|N/A|N/A|*|OK|N/A|N/A|(null)|
6|acme|RUNNING|1|2026-11-30T03:13:02|2026-11-30T03:15:04|cpu=1,node=1,billing=1,gres/gpu=2|N/A|gres:gpu:2|N/A|1|1|None|1|n3|2026-11-30T03:16:00|6|N/A|N/A|*|OK|N/A|N/A|(null)|
";
    let (jobs, unreadable) = parse_squeue(text, 1_796_008_620);
    assert!(unreadable.is_empty(), "{unreadable:?}");
    let types: Vec<(u64, Option<&str>, u32)> = jobs
        .iter()
        .map(|j| (j.id, j.gpu_type.as_deref(), j.gpus))
        .collect();
    assert_eq!(
        types,
        [
            (1, Some("h100"), 1),
            (2, Some("a100"), 1),
            (3, Some("h100"), 2),
            (4, None, 2),
            // Several types: none (a typed configuration holds such a pending job).
            (5, None, 2),
            // No typed TRES accounted: the plan counts it by its node's type.
            (6, None, 2),
        ]
    );
}

#[test]
fn grp_tres_names_each_type_after_the_total() {
    assert_eq!(grp_tres(4, None), "gres/gpu=4");
    let types = BTreeMap::from([("h100".to_string(), 3), ("a100".to_string(), 0)]);
    assert_eq!(
        grp_tres(3, Some(&types)),
        "gres/gpu=3,gres/gpu:a100=0,gres/gpu:h100=3"
    );
}

#[test]
fn host_lists_expand() {
    assert_eq!(expand_hostlist("n1").unwrap(), ["n1"]);
    assert_eq!(
        expand_hostlist("n[1-3,7],gpu-[08-10]").unwrap(),
        ["n1", "n2", "n3", "n7", "gpu-08", "gpu-09", "gpu-10"]
    );
    assert_eq!(expand_hostlist("").unwrap(), Vec::<String>::new());
    for bad in ["n[1-", "n[3-1]", "n[a-b]", "n]", "n[1-2]x"] {
        assert_eq!(expand_hostlist(bad), None, "{bad}");
    }
}

/// Issue 25, finding 8: the governor's fields omitted tres-per-socket, so a job asking
/// `--gpus-per-socket=1 --sockets-per-node=2` read as 0 GPUs (a parked inference job was
/// released "fits its team's quota" while the team was full). It is read as the plugin
/// reads it: 1 GPU x 2 sockets x 2 nodes.
#[test]
fn issue25_8_gpus_per_socket_are_counted() {
    let line = "41|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|N/A|N/A|N/A|2|2|Resources|1|(null)|2026-11-30T03:16:00|41|N/A|gres:gpu:1|2|OK|N/A|N/A|(null)|\n";
    let (jobs, unreadable) = parse_squeue(line, 1_796_008_620);
    assert!(unreadable.is_empty(), "{unreadable:?}");
    assert_eq!(jobs[0].gpus, 4);
    // Without a socket count, one socket per node: the fewest it can hold.
    let line = line.replace("|gres:gpu:1|2|", "|gres:gpu:1|*|");
    let (jobs, _) = parse_squeue(&line, 1_796_008_620);
    assert_eq!(jobs[0].gpus, 2);
}

/// Issue 25, finding 5: the jobs the governor held (outside every team, or untyped) are
/// found by their AdminComment, so that they can be released once the reason is gone; a
/// hold of the user's own, or another mark, is not the governor's.
#[test]
fn issue25_5_the_governors_own_holds_are_found() {
    let line = |id: u32, prio: u32, comment: &str| {
        format!("{id}|research|PENDING|{prio}|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|JobHeldAdmin|1|(null)|2026-11-30T03:16:00|{id}|N/A|N/A|*|OK|N/A|N/A|(null)|{comment}|\n")
    };
    let text = [
        line(1, 0, &format!("{HOLD_MARK}{OUTSIDE_HOLD}")),
        line(2, 0, &format!("{HOLD_MARK}{UNTYPED_HOLD}")),
        line(3, 0, ""),
        line(4, 0, "teamshare: held: something an administrator wrote"),
        line(5, 100, &format!("{HOLD_MARK}{OUTSIDE_HOLD}")),
        line(6, 0, &run_ended_hold_comment()),
    ]
    .concat();
    let holds = governor_holds(&squeue_records(&text));
    let begin = parse_utc("2026-11-30T03:16:00");
    assert_eq!(
        holds,
        [
            GovernorHold {
                id: 1,
                account: "research".into(),
                untyped: false,
                run_ended: false,
                begin,
            },
            GovernorHold {
                id: 2,
                account: "research".into(),
                untyped: true,
                run_ended: false,
                begin,
            },
            // Issue 25, finding 16: a hold against a second run, released where wrong.
            GovernorHold {
                id: 6,
                account: "research".into(),
                untyped: false,
                run_ended: true,
                begin,
            },
        ]
    );
}

/// Issue 25, finding 7: a pending `--exclusive` job (OverSubscribe NO) is given every GPU
/// of each node: it asks for the largest node's GPUs per node, whatever it named; a
/// running one is read from its allocation as before; `--exclusive=user` is not whole-node.
#[test]
fn issue25_7_a_pending_whole_node_job_asks_for_whole_nodes() {
    let pending = "42|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:1|N/A|2|2|Resources|1|(null)|2026-11-30T03:16:00|42|N/A|N/A|*|NO|N/A|N/A|(null)|\n";
    let SqueueRead {
        jobs, unreadable, ..
    } = read_squeue(pending, 1_796_008_620, 4);
    assert!(unreadable.is_empty(), "{unreadable:?}");
    assert_eq!(jobs[0].gpus, 8);
    let jobs = read_squeue(&pending.replace("|NO|", "|USER|"), 1_796_008_620, 4).jobs;
    assert_eq!(jobs[0].gpus, 2);
    let running = "43|agents|RUNNING|64000|2026-11-30T03:16:00|2026-11-30T03:16:00|cpu=2,gres/gpu=4|N/A|N/A|N/A|1|1|None|1|n1|2026-11-30T03:16:00|43|N/A|N/A|*|NO|N/A|N/A|(null)|\n";
    let jobs = read_squeue(running, 1_796_008_620, 8).jobs;
    assert_eq!(jobs[0].gpus, 4);
}

/// Issue 24: a pending job's SchedNodes (the nodes Slurm's backfill reserved for it) are
/// its nodes; none where it has no reservation; a running job's are its NodeList, whatever
/// its SchedNodes still say.
#[test]
fn a_pending_jobs_reserved_nodes_are_read_from_sched_nodes() {
    let line = |state: &str, list: &str, sched: &str| {
        format!("44|agents|{state}|64000|2026-11-30T03:16:00|N/A|N/A|N/A|gres:gpu:4|N/A|2|2|Resources|1|{list}|2026-11-30T03:16:00|44|N/A|N/A|*|OK|N/A|N/A|{sched}|\n")
    };
    let now = 1_796_008_620;
    let read = read_squeue(&line("PENDING", "(null)", "n[2-3]"), now, 4);
    assert!(read.unreadable.is_empty(), "{:?}", read.unreadable);
    assert_eq!(read.jobs[0].nodes, ["n2", "n3"]);
    for none in ["(null)", "", "N/A"] {
        let read = read_squeue(&line("PENDING", "(null)", none), now, 4);
        assert!(read.jobs[0].nodes.is_empty(), "{none:?}");
    }
    let read = read_squeue(&line("RUNNING", "n1", "n[2-3]"), now, 4);
    assert_eq!(read.jobs[0].nodes, ["n1"]);
}

/// Issue 25, finding 11: a heterogeneous job is judged as one job. Components of one team
/// and type are their leader's job (GPUs and nodes summed, named by the leader's id); those
/// of several teams stay apart, each counted in its team, and are acted on whole through
/// their leader.
#[test]
fn issue25_11_a_heterogeneous_job_is_one_job_acted_on_through_its_leader() {
    let line = |id: u64, team: &str, gpus: u32, node: &str, leader: u64, offset: u32| {
        format!("{id}|{team}|RUNNING|64000|2026-11-30T03:16:00|2026-11-30T03:16:00|cpu=1,gres/gpu={gpus}|N/A|gres:gpu:{gpus}|N/A|1|1|None|1|{node}|2026-11-30T03:16:00|{id}|N/A|N/A|*|OK|{leader}|{offset}|(null)|\n")
    };
    let text = [
        line(6, "agents", 2, "n1", 6, 0),
        line(7, "agents", 3, "n2", 6, 1),
        line(8, "agents", 1, "n1", 0, 0).replace("|0|0|", "|N/A|N/A|"),
        line(10, "agents", 1, "n1", 10, 0),
        line(11, "research", 2, "n2", 10, 1),
    ]
    .concat();
    let read = read_squeue(&text, 1_796_008_620, 4);
    assert!(read.unreadable.is_empty(), "{:?}", read.unreadable);
    let ids: Vec<u64> = read.jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, [6, 8, 10, 11]);
    let het = &read.jobs[0];
    assert_eq!((het.gpus, het.node_count), (5, 2));
    assert_eq!(het.nodes, ["n1", "n2"]);
    // Two teams: apart, and requeued, cancelled or held through the leader.
    assert_eq!(read.leaders, Leaders::from([(11, 10)]));
    assert_eq!(
        whole_address(&read.addresses, &read.leaders, 11).as_deref(),
        Some("10")
    );
    assert_eq!(
        whole_address(&read.addresses, &read.leaders, 8).as_deref(),
        Some("8")
    );
}

/// Issue 30: where the configuration governs shards, a job holding or asking for shards and
/// no GPU is that many GPUs of type `shard`; where it does not, it holds none, as before. A
/// node's shards become that type only then.
#[test]
fn shard_jobs_are_of_the_shard_type_only_where_shards_are_governed() {
    let text = "\
21|serve|RUNNING|640000640|2026-11-30T03:13:02|2026-11-30T03:15:04|cpu=1,node=1,billing=1,gres/shard=3|N/A|gres:shard:3|N/A|1|1|None|1|n1|2026-11-30T03:16:00|21|N/A|N/A|*|OK|N/A|N/A|(null)|
22|serve|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|N/A|gres/shard:a100:2|N/A|2|2|Priority|1|n1|2026-11-30T03:16:00|22|N/A|N/A|*|OK|N/A|N/A|(null)|
";
    let records = squeue_records(text);
    let governed = read_records_with(&records, 1_796_008_620, 4, true);
    assert!(governed.unreadable.is_empty(), "{:?}", governed.unreadable);
    let seen: Vec<(u32, Option<&str>)> = governed
        .jobs
        .iter()
        .map(|j| (j.gpus, j.gpu_type.as_deref()))
        .collect();
    // Pending: 2 shards per node on 2 nodes.
    assert_eq!(seen, [(3, Some("shard")), (4, Some("shard"))]);
    let before = read_records(&records, 1_796_008_620, 4);
    let seen: Vec<(u32, Option<&str>)> = before
        .jobs
        .iter()
        .map(|j| (j.gpus, j.gpu_type.as_deref()))
        .collect();
    assert_eq!(seen, [(0, None), (0, None)]);

    let cap = crate::capacity::parse_sinfo("n1|gpu:a100:2(S:0),shard:a100:8|idle\n").unwrap();
    assert_eq!((cap.total, cap.by_type.get("shard")), (2, None));
    let cap = cap.with_shares();
    assert_eq!(
        (cap.total, cap.by_type["shard"], cap.by_type["a100"]),
        (2, 8, 2)
    );
    assert_eq!(cap.per_node_types["n1"]["shard"], 8);
    assert_eq!(cap.per_node["n1"], 2, "shards are no GPUs of the node");
    assert_eq!(
        grp_tres(
            2,
            Some(&BTreeMap::from([("a100".into(), 2), ("shard".into(), 8)]))
        ),
        "gres/gpu=2,gres/gpu:a100=2,gres/shard=8"
    );
}
