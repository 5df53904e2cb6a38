//! The figures of hand-built outcomes, the working in the comments (also the fixtures of
//! the other replay modules' tests).

use super::*;
use crate::replay::{NodeSpec, Observed};

pub(crate) const H: Secs = 3600;
pub(crate) const T0: Secs = 1_709_251_200;

pub(crate) const CONFIG: &str = r#"
[cluster]
name = "c"
partitions = ["gpu"]
currency = "BRL"

[gpu_types.default]
rate_per_hour = 10.0

[[team]]
name = "agents"
quota = 2
borrow_limit = 2

[[team]]
name = "training"
quota = 2
borrow_limit = 2

[[priority_class]]
name = "inference"
value = 100
preemptible = false
"#;

pub(crate) fn config() -> Config {
    teamshare_config::parse(CONFIG, "teamshare.toml").unwrap()
}

pub(crate) fn job(id: u64, team: &str, eligible: Secs, gpus: u32) -> TraceJob {
    TraceJob {
        id,
        team: team.to_string(),
        class: None,
        submit: eligible,
        eligible,
        gpus,
        gpu_type: None,
        nodes: 1,
        exclusive: false,
        time_limit: 10 * H,
        work: H,
        cancelled_pending_at: None,
        observed: Observed::default(),
    }
}

/// Four GPUs (one node) over 10 hours from T0; agents (quota 2) and training (quota 2).
///
/// - job 0, agents, 2 GPUs, eligible T0, runs [T0, T0+4h): in quota (8 GPU-h);
/// - job 1, training, 2 GPUs, eligible T0, runs [T0+1h, T0+5h): in quota (8 GPU-h), waited
///   1 h; class `inference`;
/// - job 2, agents, 2 GPUs, eligible T0, borrowed: runs [T0, T0+1h) on training's idle
///   quota, preempted at T0+1h (2 GPU-h borrowed, lost); then again [T0+4h, T0+6h) in
///   quota (4 GPU-h);
/// - job 3, training, 1 GPU, eligible T0+8h, never started: censored wait of 2 h;
/// - job 4, agents, 8 GPUs: rejected.
///
/// Job 1 was in quota from T0 and started at T0+1h after agents' borrowed run was
/// preempted at T0+1h: a reclaim latency of 1 h.
///
/// GPU-hours: agents allocated 8 + 2 + 4 = 14, in quota 12, borrowed 2; training
/// allocated 8, in quota 8, lent 2 (its idle quota [T0, T0+1h) held agents' borrowed run).
/// Quota hours: 2 x 10 = 20 each; idle quota: agents 20 - 12 = 8, training 20 - 8 - 2 = 10.
/// Capacity 4 x 10 = 40 GPU-h; allocated 22 = 55 %.
/// Cost (rate 10, factor 1, quota-share idle split): agents allocated 140, training 80;
/// idle 400 - 220 = 180, half each: agents 230, training 170.
pub(crate) fn trace_and_outcome() -> (Trace, Outcome) {
    let mut j1 = job(1, "training", T0, 2);
    j1.class = Some("inference".into());
    let mut j3 = job(3, "training", T0 + 8 * H, 1);
    j3.class = Some("nonesuch".into());
    let trace = Trace {
        jobs: vec![
            job(0, "agents", T0, 2),
            j1,
            job(2, "agents", T0, 2),
            j3,
            job(4, "agents", T0, 8),
        ],
        cluster: Cluster {
            nodes: vec![NodeSpec {
                name: "n1".into(),
                gpus: 4,
                gpu_type: None,
            }],
            drains: vec![],
        },
        since: T0,
        until: T0 + 10 * H,
        source: "test".into(),
        activity: None,
    };
    let outcome = Outcome {
        jobs: vec![
            JobOutcome {
                job: 0,
                runs: vec![run(T0, T0 + 4 * H, false, false)],
                in_quota_since: Some(T0),
                ..JobOutcome::default()
            },
            JobOutcome {
                job: 1,
                runs: vec![run(T0 + H, T0 + 5 * H, false, false)],
                in_quota_since: Some(T0),
                ..JobOutcome::default()
            },
            JobOutcome {
                job: 2,
                runs: vec![
                    run(T0, T0 + H, true, true),
                    run(T0 + 4 * H, T0 + 6 * H, false, false),
                ],
                lost_gpu_secs: 2 * H,
                ..JobOutcome::default()
            },
            JobOutcome {
                job: 3,
                in_quota_since: Some(T0 + 8 * H),
                ..JobOutcome::default()
            },
            JobOutcome {
                job: 4,
                rejected: true,
                ..JobOutcome::default()
            },
        ],
        passes: 0,
        capacity: vec![(T0, 4)],
    };
    (trace, outcome)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn nearest_rank_percentiles_by_hand() {
    let v: Vec<Secs> = (1..=10).collect();
    // ceil(0.5 x 10) = 5th; ceil(0.95 x 10) = 10th; ceil(0.9 x 10) = 9th.
    assert_eq!(nearest_rank(&v, 50), Some(5));
    assert_eq!(nearest_rank(&v, 95), Some(10));
    assert_eq!(nearest_rank(&v, 90), Some(9));
    assert_eq!(nearest_rank(&v, 0), Some(1));
    assert_eq!(nearest_rank(&v, 100), Some(10));
    // Of 20 values, p95 is the 19th: ceil(19.0).
    let w: Vec<Secs> = (1..=20).map(|x| x * 10).collect();
    assert_eq!(nearest_rank(&w, 95), Some(190));
    assert_eq!(nearest_rank(&w, 99), Some(200));
    assert_eq!(nearest_rank(&[7], 50), Some(7));
    assert_eq!(nearest_rank(&[], 50), None);
    let waits = Waits::of(vec![30, 10, 20], 1);
    assert_eq!(waits.jobs, 3);
    assert_eq!(waits.censored, 1);
    assert!(close(waits.mean_secs.unwrap(), 20.0));
    assert_eq!((waits.p50_secs, waits.p95_secs), (Some(20), Some(30)));
}

#[test]
fn figures_of_a_hand_built_outcome() {
    let (trace, outcome) = trace_and_outcome();
    let f = figures(&trace, &outcome, &config());
    let names: Vec<&str> = f.rows.iter().map(|r| r.team.as_str()).collect();
    assert_eq!(names, ["agents", "training", CLUSTER]);
    let a = f.row("agents").unwrap();
    let t = f.row("training").unwrap();
    let c = f.cluster();

    // Waits: agents 0, 0 (job 4 rejected); training 1 h, 2 h censored.
    assert_eq!(a.wait.jobs, 2);
    assert_eq!(a.wait.p95_secs, Some(0));
    assert_eq!(a.rejected, 1);
    // Job 4's ask: 8 GPUs x its 1 h of work.
    assert!(close(a.rejected_gpu_hours, 8.0));
    assert_eq!(t.wait.jobs, 2);
    assert_eq!(t.wait.censored, 1);
    assert_eq!((t.wait.p50_secs, t.wait.p95_secs), (Some(H), Some(2 * H)));
    assert!(close(t.wait.mean_secs.unwrap(), 1.5 * H as f64));
    assert_eq!(t.wait_by_class["inference"].p95_secs, Some(H));
    // `nonesuch` is no class of the configuration.
    assert_eq!(t.wait_by_class[NO_CLASS].p95_secs, Some(2 * H));
    assert_eq!(c.wait.jobs, 4);
    assert_eq!(c.wait.p50_secs, Some(0));
    assert_eq!(c.wait.p99_secs, Some(2 * H));

    // In-quota time to start: agents 0 and 0; training 1 h and 2 h (censored).
    assert_eq!(a.in_quota_start.p95_secs, Some(0));
    assert_eq!(t.in_quota_start.p50_secs, Some(H));
    assert_eq!(t.in_quota_start.censored, 1);
    // Reclaim: training's job 1 (1 h); agents' own preempted run is no reclaim for it.
    assert_eq!(t.reclaim.jobs, 1);
    assert_eq!(t.reclaim.p95_secs, Some(H));
    assert_eq!(a.reclaim.jobs, 0);

    // GPU-hours (by hand in `trace_and_outcome`).
    assert!(close(a.allocated_gpu_hours, 14.0));
    assert!(close(a.in_quota_gpu_hours, 12.0));
    assert!(close(a.borrowed_gpu_hours, 2.0));
    assert!(close(a.lent_gpu_hours, 0.0));
    assert!(close(t.allocated_gpu_hours, 8.0));
    assert!(close(t.in_quota_gpu_hours, 8.0));
    assert!(close(t.lent_gpu_hours, 2.0));
    assert!(close(a.quota_gpu_hours, 20.0));
    assert!(close(a.idle_quota_gpu_hours, 8.0));
    assert!(close(t.idle_quota_gpu_hours, 10.0));
    assert!(close(f.capacity_gpu_hours, 40.0));
    assert!(close(c.allocated_gpu_hours, 22.0));
    assert!(close(c.allocated_share_pct.unwrap(), 55.0));
    assert!(close(a.allocated_share_pct.unwrap(), 35.0));
    assert!(close(c.lent_gpu_hours, 2.0));
    // Every borrowed hour ran on training's idle quota: the unowned pool (4 - 2 - 2 = 0
    // GPUs) lent none.
    assert!(close(c.unowned_lent_gpu_hours, 0.0));
    // Queued GPU-hours: training's job 1, 2 GPUs x 1 h, and job 3, 1 GPU x 2 h (censored);
    // agents' jobs started at once.
    assert!(close(t.queued_gpu_hours, 4.0));
    assert!(close(a.queued_gpu_hours, 0.0));
    assert!(close(c.queued_gpu_hours, 4.0));

    let ac = a.cost.as_ref().unwrap();
    assert!(close(ac.allocated, 140.0));
    assert!(close(ac.total, 230.0));
    assert!(close(t.cost.as_ref().unwrap().total, 170.0));
    assert!(close(c.cost.as_ref().unwrap().total, 400.0));
    assert!(close(c.cost.as_ref().unwrap().idle, 180.0));
    assert_eq!(f.currency.as_deref(), Some("BRL"));

    // Preemptions: job 2 once, 2 GPU-h lost.
    assert_eq!(a.preemptions, 1);
    assert!(close(a.lost_gpu_hours, 2.0));
    assert_eq!(a.preempted_repeatedly, 0);
    assert_eq!(c.preemptions, 1);
    assert_eq!(c.rejected, 1);
}

#[test]
fn a_cancelled_job_waits_until_its_cancellation_and_repeats_are_counted() {
    let (mut trace, mut outcome) = trace_and_outcome();
    trace.jobs[3].cancelled_pending_at = Some(T0 + 9 * H);
    outcome.jobs[3].cancelled = true;
    outcome.jobs[2]
        .runs
        .insert(1, run(T0 + 2 * H, T0 + 3 * H, true, true));
    let f = figures(&trace, &outcome, &config());
    let t = f.row("training").unwrap();
    assert_eq!(t.wait.p95_secs, Some(H));
    assert_eq!(t.cancelled, 1);
    let a = f.row("agents").unwrap();
    assert_eq!(a.preemptions, 2);
    assert_eq!(a.preempted_repeatedly, 1);
}

#[test]
fn the_observed_history_has_its_own_figures() {
    let (mut trace, _) = trace_and_outcome();
    trace.jobs[0].observed.runs = vec![(T0, Some(T0 + H)), (T0 + 2 * H, None)];
    let f = figures(&trace, &crate::replay::observed(&trace), &config());
    let a = f.row("agents").unwrap();
    assert_eq!(a.preemptions, 1);
    // 2 GPUs for 1 h, then 8 h to the end.
    assert!(close(a.allocated_gpu_hours, 18.0));
    assert!(close(a.lost_gpu_hours, 2.0));
    assert_eq!(a.reclaim.jobs, 0);
}

fn with(f: &Figures, team: &str, edit: impl Fn(&mut TeamFigures)) -> Figures {
    let mut f = f.clone();
    for r in &mut f.rows {
        if r.team == team {
            edit(r);
        }
    }
    f
}

#[test]
fn worse_off_by_wait_allocated_hours_and_lost_work() {
    let (trace, outcome) = trace_and_outcome();
    let today = figures(&trace, &outcome, &config());
    assert!(worse_off(&today, &today).is_empty());
    // training's p95 is 2 h: 10 % is 720 s; 700 s more is within, 721 s is not.
    let within = with(&today, "training", |r| r.wait.p95_secs = Some(2 * H + 700));
    assert!(worse_off(&today, &within).is_empty());
    let longer = with(&today, "training", |r| r.wait.p95_secs = Some(2 * H + 721));
    let w = worse_off(&today, &longer);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].team, "training");
    assert_eq!(w[0].measure, WorseMeasure::P95Wait);
    assert_eq!(
        w[0].reason,
        "p95 wait 2h 12m instead of 2h 00m (more than 12m 00s longer)"
    );
    // agents' p95 is 0: 60 s is the floor.
    let a60 = with(&today, "agents", |r| r.wait.p95_secs = Some(60));
    assert!(worse_off(&today, &a60).is_empty());
    let a61 = with(&today, "agents", |r| {
        r.wait.p95_secs = Some(61);
        r.allocated_gpu_hours *= 0.94; // 6 % fewer
        r.lost_gpu_hours += 1.01; // more than the 1 GPU-hour floor
        r.preemptions += 1;
    });
    let w = worse_off(&today, &a61);
    let measures: Vec<WorseMeasure> = w.iter().map(|w| w.measure).collect();
    assert_eq!(
        measures,
        [
            WorseMeasure::P95Wait,
            WorseMeasure::AllocatedGpuHours,
            WorseMeasure::LostGpuHours
        ]
    );
    assert!(
        w[2].reason.ends_with("(2 preemptions instead of 1)"),
        "{}",
        w[2].reason
    );
    let small = with(&today, "agents", |r| {
        r.allocated_gpu_hours *= 0.96;
        r.lost_gpu_hours += 0.99;
    });
    assert!(worse_off(&today, &small).is_empty());
    // A candidate that refuses more of a team's jobs leaves them out of its waits, so
    // its waits can only look better: the refusals themselves make the team worse off.
    let refused = with(&today, "training", |r| {
        r.rejected = 16;
        r.rejected_gpu_hours = 32.0;
        r.wait.p95_secs = Some(0);
    });
    let w = worse_off(&today, &refused);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].measure, WorseMeasure::Rejected);
    assert_eq!(
        w[0].reason,
        "16 jobs (32.0 GPU-hours) refused at submit instead of 0"
    );
    // Admitted jobs that never start: training's job 3 already never starts (1); one more is
    // worse off.
    assert_eq!(today.row("training").unwrap().never_started, 1);
    let starved = with(&today, "training", |r| {
        r.never_started = 2;
        r.never_started_gpu_hours = 9.5;
    });
    let w = worse_off(&today, &starved);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].measure, WorseMeasure::NeverStarted);
    assert_eq!(
        w[0].reason,
        "2 admitted jobs (9.5 GPU-hours of work) never started instead of 1"
    );
}

#[test]
fn durations_read_at_a_glance() {
    assert_eq!(duration(45), "45s");
    assert_eq!(duration(843), "14m 03s");
    assert_eq!(duration(7500), "2h 05m");
    assert_eq!(duration(3 * 86_400 + 4 * 3600 + 59), "3d 04h");
    assert_eq!(duration(-60), "-1m 00s");
}
