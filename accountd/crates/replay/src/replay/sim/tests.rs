use super::queue::Level;
use super::*;
use crate::replay::{NodeSpec, Observed};

proptest::proptest! {
    /// A chunked level holds what a sorted vector holds, and counts the same before any
    /// job, through any sequence of jobs joining and leaving (small chunks split often).
    #[test]
    fn a_level_counts_as_a_sorted_vector_does(
        ops in proptest::collection::vec((proptest::bool::ANY, 0usize..2000), 0..3000),
        probes in proptest::collection::vec(0usize..2100, 1..50),
    ) {
        let mut level = Level::default();
        let mut model: Vec<usize> = Vec::new();
        for (join, j) in ops {
            let at = model.partition_point(|x| *x < j);
            if join {
                level.insert(j);
                if model.get(at) != Some(&j) {
                    model.insert(at, j);
                }
            } else {
                level.remove(j);
                if model.get(at) == Some(&j) {
                    model.remove(at);
                }
            }
            proptest::prop_assert_eq!(level.len, model.len());
        }
        let flat: Vec<usize> = level.chunks.concat();
        proptest::prop_assert_eq!(&flat, &model);
        for p in probes {
            proptest::prop_assert_eq!(level.below(p), model.partition_point(|x| *x < p));
        }
    }
}

/// Two teams of quota 4 on `nodes` nodes of `per_node` GPUs; `extra` goes into the
/// first team's table, `governance` replaces the governance table's timing.
fn config(a_extra: &str, b_extra: &str, governance: &str) -> Config {
    config_q(4, 4, a_extra, b_extra, governance)
}

fn config_q(qa: u32, qb: u32, a_extra: &str, b_extra: &str, governance: &str) -> Config {
    let text = format!(
        r#"
[cluster]
name = "t"
partitions = ["gpu"]
idle_sharing = "fifo"
currency = "USD"

[gpu_types.default]
rate_per_hour = 1.0

[[team]]
name = "a"
quota = {qa}
{a_extra}

[[team]]
name = "b"
quota = {qb}
{b_extra}

[[priority_class]]
name = "inference"
value = 100
preemptible = false

[governance]
reclaim_mode = "requeue"
{governance}
"#
    );
    teamshare_config::parse(&text, "t.toml").expect("test config")
}

fn no_wait() -> &'static str {
    "reclaim_grace = \"0s\"\nmin_runtime_before_reclaim = \"0s\""
}

pub(super) fn job(id: u64, team: &str, submit: Secs, gpus: u32, work: Secs) -> TraceJob {
    TraceJob {
        id,
        team: team.into(),
        class: None,
        submit,
        eligible: submit,
        gpus,
        gpu_type: None,
        nodes: 1,
        exclusive: false,
        time_limit: work * 2,
        work,
        cancelled_pending_at: None,
        observed: Observed::default(),
    }
}

pub(super) fn trace(jobs: Vec<TraceJob>, nodes: u32, per_node: u32) -> Trace {
    Trace {
        jobs,
        cluster: Cluster {
            nodes: (0..nodes)
                .map(|i| NodeSpec {
                    name: format!("n{i}"),
                    gpus: per_node,
                    gpu_type: None,
                })
                .collect(),
            drains: Vec::new(),
        },
        since: 0,
        until: 100_000,
        source: "test".into(),
        activity: None,
    }
}

fn sim(t: &Trace, c: &Config, params: &SimParams) -> Outcome {
    simulate(t, c, params, &mut |_| {})
}

fn starts(o: &Outcome) -> Vec<Vec<(Secs, Secs)>> {
    o.jobs
        .iter()
        .map(|j| j.runs.iter().map(|r| (r.start, r.end)).collect())
        .collect()
}

#[test]
fn siloed_a_team_waits_for_its_own_quota() {
    // a has quota 4 on one 8-GPU node, b is idle. Siloed: a's second 4-GPU job may not
    // borrow b's idle quota, so it starts when the first ends: at 0 + 100 = 100.
    let t = trace(vec![job(1, "a", 0, 4, 100), job(2, "a", 0, 4, 100)], 1, 8);
    let shared = config("", "", no_wait());
    let o = sim(&t, &crate::replay::siloed(&shared), &SimParams::default());
    assert_eq!(starts(&o), vec![vec![(0, 100)], vec![(100, 200)]]);
    // Shared: the second borrows b's idle 4 GPUs and starts at once.
    let o = sim(&t, &shared, &SimParams::default());
    assert_eq!(starts(&o), vec![vec![(0, 100)], vec![(0, 100)]]);
    assert!(o.jobs[1].runs[0].borrowed && !o.jobs[0].runs[0].borrowed);
}

#[test]
fn reclaim_restarts_the_borrower_from_zero_without_a_checkpoint() {
    // a runs 4 in quota and 4 borrowed from 0; b submits 4 GPUs at 50. b's job is in
    // quota: it preempts a's borrowed job (grace 0) and starts at 50, waiting 0 s.
    // a's job lost 50 s x 4 GPUs = 200 GPU-s, is requeued and may start again at
    // 50 + 121 = 171 (a's first job ended at 100, so a's quota is free), needs its full
    // 100 s again: [171, 271).
    let t = trace(
        vec![
            job(1, "a", 0, 4, 100),
            job(2, "a", 0, 4, 100),
            job(3, "b", 50, 4, 100),
        ],
        1,
        8,
    );
    let c = config("", "", no_wait());
    let o = sim(&t, &c, &slurm_requeue_delay());
    assert_eq!(
        starts(&o),
        vec![vec![(0, 100)], vec![(0, 50), (171, 271)], vec![(50, 150)]]
    );
    assert_eq!(o.jobs[1].lost_gpu_secs, 200);
    assert_eq!(o.jobs[1].preemptions(), 1);
    assert!(o.jobs[1].runs[0].preempted && !o.jobs[1].runs[1].borrowed);
    // b's job fitted its quota from its submission.
    assert_eq!(o.jobs[2].in_quota_since, Some(50));
    // The governor lifts the delay after 3 s (53): the job starts again as soon as a's
    // quota is free, when a's first job ends at 100.
    let o = sim(&t, &c, &SimParams::default());
    assert_eq!(starts(&o)[1], vec![(0, 50), (100, 200)]);
}

/// Slurm's own requeue delay (121 s), as the hand-worked tests count it.
fn slurm_requeue_delay() -> SimParams {
    SimParams {
        requeue_delay: 121,
        ..SimParams::default()
    }
}

#[test]
fn a_checkpointing_job_loses_at_most_its_interval() {
    // As above, but a checkpoints every 30 s: at 50 it has 30 s saved and loses 20 s x 4
    // = 80 GPU-s; it needs 100 - 30 = 70 s more: [171, 241).
    let t = trace(
        vec![
            job(1, "a", 0, 4, 100),
            job(2, "a", 0, 4, 100),
            job(3, "b", 50, 4, 100),
        ],
        1,
        8,
    );
    let c = config("", "", no_wait());
    let params = SimParams {
        checkpoint: BTreeMap::from([("a".to_string(), 30)]),
        ..slurm_requeue_delay()
    };
    let o = sim(&t, &c, &params);
    assert_eq!(starts(&o)[1], vec![(0, 50), (171, 241)]);
    assert_eq!(o.jobs[1].lost_gpu_secs, 80);
}

#[test]
fn the_idle_part_of_lost_work_is_read_from_the_span_lost() {
    // As above (checkpoints every 30 s, preempted at 50: [30, 50) lost, 80 GPU-s), with
    // samples of job 2 in stretches of 10 s on its 4 GPUs: idle from 0 to 40 s, busy from 40
    // on. The span lost holds the stretches at 30 (idle) and 40 (busy): 10 s x 4 GPUs =
    // 40,000 GPU-ms of it was idle. Its second run starts at 30 s into its work: a second
    // preemption there would read from there (none comes).
    let mut t = trace(
        vec![
            job(1, "a", 0, 4, 100),
            job(2, "a", 0, 4, 100),
            job(3, "b", 50, 4, 100),
        ],
        1,
        8,
    );
    let stretch = |at: i64, idle: bool| {
        let w = teamshare_policy::governance::idleness::SampledWindow {
            samples: 4,
            sampled_ms: 40_000,
            idle_ms: if idle { 40_000 } else { 0 },
        };
        (at * 1000, w)
    };
    let series = Series::new((0..10).map(|k| stretch(k * 10, k < 4)));
    t.activity = Some(std::sync::Arc::new(crate::replay::activity::Activity {
        jobs: BTreeMap::from([(2, series)]),
        idle_threshold_pct: 5.0,
    }));
    let c = config("", "", no_wait());
    let params = SimParams {
        checkpoint: BTreeMap::from([("a".to_string(), 30)]),
        ..slurm_requeue_delay()
    };
    let o = sim(&t, &c, &params);
    assert_eq!(starts(&o)[1], vec![(0, 50), (171, 241)]);
    assert_eq!(
        (o.jobs[1].lost_gpu_secs, o.jobs[1].lost_idle_gpu_ms),
        (80, 40_000)
    );
    // Samples change no victim where the candidate does not order by them.
    assert_eq!(
        starts(&o),
        starts(&sim(&trace(t.jobs.clone(), 1, 8), &c, &params))
    );
}

#[test]
fn min_runtime_protects_a_young_borrower() {
    // min runtime 60 s: a's borrowed job (started at 0) is no victim before 60. b's job
    // submitted at 50 waits 10 s and preempts it at 60; a loses 60 x 4 = 240 GPU-s.
    let t = trace(
        vec![
            job(1, "a", 0, 4, 100),
            job(2, "a", 0, 4, 100),
            job(3, "b", 50, 4, 100),
        ],
        1,
        8,
    );
    let c = config(
        "",
        "",
        "reclaim_grace = \"0s\"\nmin_runtime_before_reclaim = \"60s\"",
    );
    let o = sim(&t, &c, &SimParams::default());
    assert_eq!(starts(&o)[2], vec![(60, 160)]);
    assert_eq!(starts(&o)[1][0], (0, 60));
    assert_eq!(o.jobs[1].lost_gpu_secs, 240);
}

#[test]
fn grace_keeps_the_victims_gpus_until_it_ends() {
    // grace 30 s: the victim is signalled at 50 and leaves at 80; b starts at 80 and a's
    // job, having run 80 s, lost 80 x 4 = 320 GPU-s.
    let t = trace(
        vec![
            job(1, "a", 0, 4, 100),
            job(2, "a", 0, 4, 100),
            job(3, "b", 50, 4, 100),
        ],
        1,
        8,
    );
    let c = config(
        "",
        "",
        "reclaim_grace = \"30s\"\nmin_runtime_before_reclaim = \"0s\"",
    );
    let o = sim(&t, &c, &SimParams::default());
    assert_eq!(starts(&o)[2], vec![(80, 180)]);
    assert_eq!(o.jobs[1].lost_gpu_secs, 320);
}

#[test]
fn lend_limit_zero_keeps_the_idle_quota_unlent() {
    // b lends nothing and the cluster has no unallocated GPU (8 = 4 + 4): a's second job
    // waits for a's first to end at 100, as siloed.
    let t = trace(vec![job(1, "a", 0, 4, 100), job(2, "a", 0, 4, 100)], 1, 8);
    let c = config("", "lend_limit = 0", no_wait());
    let o = sim(&t, &c, &SimParams::default());
    assert_eq!(starts(&o), vec![vec![(0, 100)], vec![(100, 200)]]);
}

#[test]
fn a_non_preemptible_class_never_borrows() {
    // a's second inference job (not preemptible) does not fit a's quota while its first
    // runs, and cannot displace a job of its own class: it is parked until the first ends
    // at 100, though b's 4 GPUs are idle.
    let mut first = job(1, "a", 0, 4, 100);
    first.class = Some("inference".into());
    let mut second = job(2, "a", 10, 4, 100);
    second.class = Some("inference".into());
    let t = trace(vec![first, second], 1, 8);
    let c = config("", "", no_wait());
    let o = sim(&t, &c, &SimParams::default());
    assert_eq!(starts(&o)[1], vec![(100, 200)]);
    assert!(!o.jobs[1].runs[0].borrowed);
}

#[test]
fn a_higher_class_displaces_its_own_teams_lower_class() {
    // a's inference job at 10 does not fit a's quota (a's unclassed job holds it): the
    // governor requeues a's own lower-class job (preempt_within_team = lower-priority), so
    // the inference job starts at 10. The displaced job lost 10 x 4 = 40 GPU-s and runs
    // again from 10 + 121 = 131: [131, 231).
    let mut inference = job(2, "a", 10, 4, 100);
    inference.class = Some("inference".into());
    let t = trace(vec![job(1, "a", 0, 4, 100), inference], 1, 8);
    let c = config("", "", no_wait());
    let o = sim(&t, &c, &slurm_requeue_delay());
    assert_eq!(starts(&o), vec![vec![(0, 10), (131, 231)], vec![(10, 110)]]);
    assert_eq!(o.jobs[0].lost_gpu_secs, 40);
    // Issue 27, item 7: the inference job ranks ahead of every borrower, but it displaces
    // (rule 6) rather than fits a's unused quota, so its wait is no in-quota start (nor an
    // owner's reclaim); the job that fitted the quota at 0 is one.
    assert_eq!(o.jobs[1].in_quota_since, None);
    assert_eq!(o.jobs[0].in_quota_since, Some(0));
    // With the governor lifting the delay: b's idle quota is lent to it at 13.
    let o = sim(&t, &c, &SimParams::default());
    assert_eq!(starts(&o)[0], vec![(0, 10), (13, 113)]);
}

#[test]
fn a_drained_node_takes_no_new_job() {
    // Two 4-GPU nodes; n1 is drained over [0, 500). a's job holds n0 over [0, 100); b's
    // job (in quota, submitted at 10) has nowhere to go and nothing to preempt (a is in
    // quota): it starts on n0 at 100, waiting 90 s.
    let mut t = trace(vec![job(1, "a", 0, 4, 100), job(2, "b", 10, 4, 100)], 2, 4);
    t.cluster.drains.push(crate::replay::Drain {
        node: "n1".into(),
        since: 0,
        until: 500,
    });
    let c = config("", "", no_wait());
    let o = sim(&t, &c, &SimParams::default());
    assert_eq!(starts(&o), vec![vec![(0, 100)], vec![(100, 200)]]);
    assert_eq!(o.capacity, vec![(0, 4), (500, 8)]);
}

#[test]
fn backfill_fills_a_hole_only_with_what_ends_in_time() {
    // Two 8-GPU nodes; a's quota is 8, b's 12. a's job 1 (6 GPUs, limit 200) takes n0 and
    // a's job 2 (8 GPUs, limit 600) n1, borrowing b's idle quota; min runtime 1000 s keeps
    // job 2 from being reclaimed. b's 8-GPU job 3 (in quota, submitted at 1) fits no node:
    // backfill reserves n0 for it from 0 + 200 (job 1's time limit). b's 1-GPU job 4
    // (limit 100, at 2) ends by 102 <= 200 and backfills on n0's 2 free GPUs at 2; b's
    // 1-GPU job 5 (limit 600, at 3) would end after 200 on the reserved node: it waits.
    // Job 1 really ends at 100: job 3 starts then, on n0, and ends at 200, when job 5
    // takes n0: [200, 500).
    let t = trace(
        vec![
            job(1, "a", 0, 6, 100),
            job(2, "a", 0, 8, 300),
            job(3, "b", 1, 8, 100),
            job(4, "b", 2, 1, 50),
            job(5, "b", 3, 1, 300),
        ],
        2,
        8,
    );
    let c = config_q(
        8,
        12,
        "",
        "",
        "reclaim_grace = \"0s\"\nmin_runtime_before_reclaim = \"1000s\"",
    );
    let o = sim(&t, &c, &SimParams::default());
    let s = starts(&o);
    assert_eq!(s[0], vec![(0, 100)]);
    assert_eq!(s[1], vec![(0, 300)]);
    assert_eq!(s[3], vec![(2, 52)], "job 4 backfills");
    assert_eq!(s[2], vec![(100, 200)]);
    assert_eq!(
        s[4],
        vec![(200, 500)],
        "job 5 does not jump the reservation"
    );
}

#[test]
fn the_same_input_gives_the_same_outcome() {
    let t = trace(
        vec![
            job(1, "a", 0, 4, 100),
            job(2, "a", 0, 4, 100),
            job(3, "b", 50, 4, 100),
        ],
        1,
        8,
    );
    let c = config("", "", no_wait());
    assert_eq!(
        sim(&t, &c, &SimParams::default()),
        sim(&t, &c, &SimParams::default())
    );
}

mod property {
    use super::*;
    use proptest::prelude::*;

    /// Teams t0 (quota `q0`), t1 (3) and t2 (2), fifo or fair-share, with these
    /// `[governance]` lines.
    fn three_teams(fair: bool, q0: u32, governance: &str) -> Config {
        let text = format!(
            r#"
[cluster]
name = "p"
partitions = ["gpu"]
idle_sharing = "{}"
currency = "USD"
[gpu_types.default]
rate_per_hour = 1.0
[[team]]
name = "t0"
quota = {q0}
[[team]]
name = "t1"
quota = 3
[[team]]
name = "t2"
quota = 2
[governance]
{governance}
"#,
            if fair { "fair-share" } else { "fifo" }
        );
        teamshare_config::parse(&text, "p.toml").expect("config")
    }

    /// A history of one-GPU jobs (no fragmentation) on one 8-GPU node: team, submit, work.
    fn history() -> impl Strategy<Value = Vec<(u8, Secs, Secs)>> {
        prop::collection::vec((0u8..3, 0i64..2_000, 1i64..600), 1..40)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Sharing with borrowing never starts a job later than siloed would, beyond the
        /// reclaim delay: min runtime (a victim's protection) + grace + one pass.
        #[test]
        fn sharing_never_delays_a_job_beyond_the_reclaim_delay(
            jobs in history(),
            fair in any::<bool>(),
            min_runtime in 0i64..120,
            grace in 0i64..60,
        ) {
            let governance = format!(
                "reclaim_grace = \"{grace}s\"\nmin_runtime_before_reclaim = \"{min_runtime}s\""
            );
            let shared = three_teams(fair, 3, &governance);
            let mut list: Vec<TraceJob> = jobs
                .iter()
                .enumerate()
                .map(|(i, (team, submit, work))| {
                    job(i as u64 + 1, &format!("t{team}"), *submit, 1, *work)
                })
                .collect();
            list.sort_by_key(|j| (j.submit, j.id));
            let t = trace(list, 1, 8);
            let params = SimParams::default();
            let silo = sim(&t, &crate::replay::siloed(&shared), &params);
            let share = sim(&t, &shared, &params);
            let delay = min_runtime + grace + params.pass_interval + 1;
            let self_preempted: std::collections::BTreeSet<&str> = share
                .jobs
                .iter()
                .filter(|o| o.preemptions() > 0)
                .map(|o| t.jobs[o.job].team.as_str())
                .collect();
            for (i, (s, b)) in silo.jobs.iter().zip(&share.jobs).enumerate() {
                // In quota: it fitted its team's unused quota when it was submitted. A
                // team whose own borrowed jobs were preempted is left out: requeued, they
                // keep their older submit time and go ahead of its later jobs in its own
                // quota (the price of its own borrowing, not a lender's loss).
                let submit = t.jobs[i].submit;
                if b.in_quota_since != Some(submit) || self_preempted.contains(t.jobs[i].team.as_str()) {
                    continue;
                }
                let shared = b.first_start();
                prop_assert!(
                    shared.is_some_and(|x| x <= submit + delay),
                    "in-quota job {} ({}) submitted at {} starts at {:?}",
                    t.jobs[i].id, t.jobs[i].team, submit, shared
                );
                if let (Some(siloed), Some(shared)) = (s.first_start(), shared) {
                    prop_assert!(
                        shared <= siloed + delay,
                        "job {} ({}) starts at {} shared, {} siloed",
                        t.jobs[i].id, t.jobs[i].team, shared, siloed
                    );
                }
            }
        }

        /// Issue 27: no admitted job waits for ever while GPUs it could use stay idle. Jobs of
        /// one to four GPUs on one node and whole two-node jobs of eight, of three teams whose
        /// quotas leave an unowned pool, on three 4-GPU nodes: once submissions stop, the
        /// queue drains, so every job starts before the period's end (100,000 s, far past
        /// the last submission at 2,000 s and all the work, at most 24,000 s, done one job
        /// after the other). A wide borrower held by its team's limit while small ones take
        /// every GPU that comes free starts at the latest when the cluster goes idle.
        #[test]
        fn no_admitted_job_waits_for_ever_while_the_gpus_it_fits_stand_idle(
            jobs in prop::collection::vec((0u8..3, 0i64..2_000, 0usize..5, 1i64..600), 1..40),
            fair in any::<bool>(),
            min_runtime in 0i64..120,
        ) {
            let governance = format!("min_runtime_before_reclaim = \"{min_runtime}s\"");
            let config = three_teams(fair, 4, &governance);
            let shapes = [(1, 1), (2, 1), (3, 1), (4, 1), (8, 2)];
            let mut list: Vec<TraceJob> = jobs
                .iter()
                .enumerate()
                .map(|(i, (team, submit, shape, work))| {
                    let (gpus, nodes) = shapes[*shape];
                    TraceJob {
                        nodes,
                        ..job(i as u64 + 1, &format!("t{team}"), *submit, gpus, *work)
                    }
                })
                .collect();
            list.sort_by_key(|j| (j.submit, j.id));
            let t = trace(list, 3, 4);
            let out = sim(&t, &config, &SimParams::default());
            for (i, o) in out.jobs.iter().enumerate() {
                prop_assert!(
                    o.first_start().is_some(),
                    "job {} ({}, {} GPUs on {} nodes, submitted at {}) never started",
                    t.jobs[i].id, t.jobs[i].team, t.jobs[i].gpus, t.jobs[i].nodes, t.jobs[i].submit
                );
            }
        }
    }
}

/// Issue 30: two teams of an A100's worth each (`quota = { a100 = 1 }`, borrowing up to one
/// A100's worth) on two nodes of seven `1g.10gb` slices (1/7 of an A100 each).
fn family_config() -> Config {
    let text = r#"
[cluster]
name = "t"
partitions = ["gpu"]
idle_sharing = "fifo"

[gpu_types.a100]
rate_per_hour = 2.8

[gpu_types."1g.10gb"]
slices_of = "a100"
gpus = "1/7"

[[team]]
name = "a"
quota = { a100 = 1 }
borrow_limit = { a100 = 1 }

[[team]]
name = "b"
quota = { a100 = 1 }
borrow_limit = { a100 = 1 }

[governance]
reclaim_mode = "requeue"
reclaim_grace = "0s"
min_runtime_before_reclaim = "0s"
"#;
    teamshare_config::parse(text, "t.toml").expect("test config")
}

fn slice_trace(jobs: Vec<TraceJob>) -> Trace {
    let mut t = trace(jobs, 2, 7);
    for n in &mut t.cluster.nodes {
        n.gpu_type = Some("1g.10gb".into());
    }
    for j in &mut t.jobs {
        j.gpu_type = Some("1g.10gb".into());
    }
    t
}

#[test]
fn a_family_quota_counts_slices_at_their_worth() {
    // a runs 8 slices from 0: 7 are its A100's worth, the 8th borrows from b's idle quota.
    // Counting a slice as a GPU of quota 1 would make 7 of them borrowed.
    let jobs: Vec<TraceJob> = (1..=8).map(|i| job(i, "a", 0, 1, 100)).collect();
    let c = family_config();
    let o = sim(&slice_trace(jobs.clone()), &c, &SimParams::default());
    let borrowed: Vec<bool> = o.jobs.iter().map(|j| j.runs[0].borrowed).collect();
    assert_eq!(borrowed, [vec![false; 7], vec![true]].concat());
    assert!(o.jobs.iter().all(|j| j.runs[0].start == 0));
    // Siloed, the 8th waits for one of the seven to end at 100.
    let o = sim(
        &slice_trace(jobs),
        &crate::replay::siloed(&c),
        &SimParams::default(),
    );
    assert_eq!(starts(&o)[7], vec![(100, 200)]);
}

#[test]
fn a_family_team_takes_its_slices_back_one_by_one() {
    // a holds 8 slices (1 borrowed) and 6 stand free; b asks for its 7 at 50. Six start on
    // the free slices, the 7th takes back a's borrowed one: exactly one of a's jobs is
    // preempted, none of the seven in its quota.
    let mut jobs: Vec<TraceJob> = (1..=8).map(|i| job(i, "a", 0, 1, 100)).collect();
    jobs.extend((9..=15).map(|i| job(i, "b", 50, 1, 100)));
    let o = sim(&slice_trace(jobs), &family_config(), &SimParams::default());
    let preempted: Vec<u64> = (0..8)
        .filter(|&i| o.jobs[i].preemptions() > 0)
        .map(|i| i as u64 + 1)
        .collect();
    assert_eq!(preempted, vec![8]);
    assert!(o.jobs[8..]
        .iter()
        .all(|j| j.runs[0].start == 50 && !j.runs[0].borrowed));
    assert!(o.jobs[8..].iter().all(|j| j.in_quota_since == Some(50)));
}
