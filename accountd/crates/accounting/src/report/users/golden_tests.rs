//! Golden test of `report users`: a month of job runs and NVML samples in an in-memory store,
//! computed by hand, the hand computation written beside each expectation.

use super::*;
use crate::gpu_sample::Sample;
use crate::report::Format;
use crate::sacct::JobRun;
use crate::store::tests::run;
use chrono::Utc;

const H: i64 = 3600;
/// 2024-04-01T00:00:00Z: April, 30 days.
const APR1: i64 = 1_711_929_600;
/// 2024-05-01T00:00:00Z.
const MAY1: i64 = APR1 + 30 * 24 * H;

/// April `day`, `hour`:00 UTC.
fn apr(day: i64, hour: i64) -> i64 {
    APR1 + (day - 1) * 24 * H + hour * H
}

/// March `day`, `hour`:00 UTC.
fn mar(day: i64, hour: i64) -> i64 {
    apr(day - 31, hour)
}

/// A run of `user` in `team`.
fn user_run(job: u32, user: &str, team: &str, start: i64, end: Option<i64>, gpus: u64) -> JobRun {
    let mut r = run(job, team, start, end, gpus);
    r.user = user.into();
    r
}

/// Samples of `gpu` every hour from `from` for `hours`, each standing for that hour
/// (`interval_ms` 3,600,000, the longest a sample may stand for), at `util(i)` % in hour `i`.
/// `job`: the run the node saw holding the GPU, with its start when the node could tell it.
fn hourly(
    gpu: &str,
    job: Option<(u32, Option<i64>)>,
    from: i64,
    hours: i64,
    util: impl Fn(i64) -> u32,
) -> Vec<Sample> {
    (0..hours)
        .map(|i| Sample {
            node: "n1".into(),
            gpu_uuid: gpu.into(),
            ts_ms: (from + i * H) * 1000,
            interval_ms: H * 1000,
            minor: None,
            job_id_raw: job.map(|j| j.0),
            job_start: job.and_then(|j| j.1),
            util_gpu: util(i),
            util_mem: 0,
            mem_used: 0,
            mem_total: None,
            processes: None,
        })
        .collect()
}

/// April 2024, idle under 5 %, two teams (agents, training), three users; every sample stands
/// for one GPU-hour:
///
/// | job  | user, team      | GPUs | ran (UTC)                  | samples                               |
/// |------|-----------------|------|----------------------------|---------------------------------------|
/// | 100  | alice, agents   | 1    | Mar 20 00:00 - Mar 21      | 24 h at 0 %: March, not counted       |
/// | 101  | alice, agents   | 2    | Apr 1 00:00 - Apr 3 00:00  | each GPU 10 h at 2 %, then 38 h at 80 % |
/// | 90_2 | alice, agents   | 1    | Apr 10 00:00 - Apr 11      | 24 h at 0 % (JobIDRaw 102: array task) |
/// | 103  | alice, agents   | 1    | Apr 20 00:00 - 10:00       | the first 4 h only, at 3 %            |
/// | 104  | alice, agents   | 1    | Apr 25 12:00 - 14:00       | 1 h at 4 %, 1 h at 5 % (not under 5) |
/// | 201  | bob, agents     | 4    | Apr 5 00:00 - Apr 6        | 24 h at 100 % on each GPU             |
/// | 202  | bob, training   | 1    | Apr 15 06:00 - 12:00       | 6 h at 1 %                            |
/// | 301  | carol, training | 2    | Mar 31 12:00 - Apr 2 12:00 | each hour of it: c1 at 50 %, c2 at 0 % |
/// | 302  | carol, training | 1    | Apr 29 00:00 - running     | 49 h at 20 %, the last at May 1 00:00 |
/// | 999  | (not in sacct)  |      |                            | 3 h at 0 % on Apr 7                   |
/// | -    | (no job)        |      |                            | a free GPU, 5 h at 0 % on Apr 8       |
///
/// 103 is partly unsampled (4 of its 10 hours). The node could not tell 302's start: its samples
/// carry the job alone.
///
/// Now is May 1 01:00: the running run counts up to the period's end.
fn april() -> (Store, UtilisationParams) {
    let mut store = Store::open_in_memory().unwrap();
    let mut array_task = user_run(102, "alice", "agents", apr(10, 0), Some(apr(11, 0)), 1);
    array_task.job_id = "90_2".into();
    let runs = [
        user_run(100, "alice", "agents", mar(20, 0), Some(mar(21, 0)), 1),
        user_run(101, "alice", "agents", apr(1, 0), Some(apr(3, 0)), 2),
        array_task,
        user_run(103, "alice", "agents", apr(20, 0), Some(apr(20, 10)), 1),
        user_run(104, "alice", "agents", apr(25, 12), Some(apr(25, 14)), 1),
        user_run(201, "bob", "agents", apr(5, 0), Some(apr(6, 0)), 4),
        user_run(202, "bob", "training", apr(15, 6), Some(apr(15, 12)), 1),
        user_run(301, "carol", "training", mar(31, 12), Some(apr(2, 12)), 2),
        user_run(302, "carol", "training", apr(29, 0), None, 1),
    ];
    store.record_runs(&runs, 1, None).unwrap();
    let at = |r: &JobRun| Some((r.job_id_raw, Some(r.start)));
    let mut samples = Vec::new();
    samples.extend(hourly("GPU-z", at(&runs[0]), runs[0].start, 24, |_| 0));
    let idle_first_10_h = |i: i64| if i < 10 { 2 } else { 80 };
    for gpu in ["GPU-a1", "GPU-a2"] {
        samples.extend(hourly(gpu, at(&runs[1]), apr(1, 0), 48, idle_first_10_h));
    }
    samples.extend(hourly("GPU-b", at(&runs[2]), apr(10, 0), 24, |_| 0));
    samples.extend(hourly("GPU-c", at(&runs[3]), apr(20, 0), 4, |_| 3));
    let at_4_then_5 = |i: i64| if i == 0 { 4 } else { 5 };
    samples.extend(hourly("GPU-d", at(&runs[4]), apr(25, 12), 2, at_4_then_5));
    for gpu in ["GPU-e1", "GPU-e2", "GPU-e3", "GPU-e4"] {
        samples.extend(hourly(gpu, at(&runs[5]), apr(5, 0), 24, |_| 100));
    }
    samples.extend(hourly("GPU-f", at(&runs[6]), apr(15, 6), 6, |_| 1));
    samples.extend(hourly("GPU-c1", at(&runs[7]), runs[7].start, 48, |_| 50));
    samples.extend(hourly("GPU-c2", at(&runs[7]), runs[7].start, 48, |_| 0));
    samples.extend(hourly("GPU-g", Some((302, None)), apr(29, 0), 49, |_| 20));
    samples.extend(hourly(
        "GPU-x",
        Some((999, Some(apr(7, 0)))),
        apr(7, 0),
        3,
        |_| 0,
    ));
    samples.extend(hourly("GPU-free", None, apr(8, 0), 5, |_| 0));
    store.record_samples("c", &samples, 5.0, MAY1).unwrap();
    // The idle policy's steps (issue 29): alice's 101 noticed then requeued, her 90_2 noticed
    // then cleared (it computed again); bob's 202 noticed on March 31 (before the period);
    // dave, with no run in April, noticed once (no row to count it on).
    let step = |ts: i64, job: u64, user: &str, team: &str, step: &str| crate::store::IdleStepRow {
        ts,
        job_id_raw: job,
        run_start: 0,
        team: team.into(),
        user: user.into(),
        step: step.into(),
    };
    store
        .record_idle_steps(
            "c",
            &[
                step(apr(3, 1), 101, "alice", "agents", "notice"),
                step(apr(3, 2), 101, "alice", "agents", "requeue"),
                step(apr(10, 1), 102, "alice", "agents", "notice"),
                step(apr(10, 5), 102, "alice", "agents", "cleared"),
                step(mar(31, 23), 202, "bob", "training", "notice"),
                step(apr(12, 0), 999, "dave", "agents", "notice"),
            ],
        )
        .unwrap();
    let params = UtilisationParams {
        cluster: "c".into(),
        period: Period {
            since: APR1,
            until: MAY1,
        },
        idle_threshold: 5.0,
        now: MAY1 + H,
    };
    (store, params)
}

/// (user, team, jobs, allocated, sampled, idle, unsampled GPU-hours, worst runs (job, idle)).
type Expected = (
    &'static str,
    &'static str,
    usize,
    f64,
    f64,
    f64,
    f64,
    &'static [(&'static str, f64)],
);

#[test]
fn a_month_of_users_computed_by_hand() {
    let (store, p) = april();
    let r = users_report(&store, &p).unwrap();
    // Per user and team (GPU-hours; allocated = GPUs x hours in April, sampled and idle = the
    // April samples, each one GPU-hour, idle under 5 %; unsampled = allocated - sampled, per run):
    //
    // alice, agents: 100 ran in March: not a job of the period. Jobs 101, 90_2, 103, 104: 4.
    //   allocated 2x48 + 1x24 + 1x10 + 1x2 = 96 + 24 + 10 + 2 = 132
    //   sampled   96 + 24 + 4 + 2 = 126
    //   idle      101: 2 GPUs x 10 h = 20; 90_2: 24; 103: 4; 104: 1 (5 % is not under 5 %)
    //             = 20 + 24 + 4 + 1 = 49
    //   unsampled 103: 10 - 4 = 6; the others 0 -> 6 (never idle: 103 counts 4 idle, not 10)
    //   idle share 49 / 132 = 37.1212 %; worst: 90_2 (24), 101 (20), 103 (4); 104 (1) is the
    //   fourth, not named.
    // carol, training: jobs 301, 302: 2.
    //   allocated 301: Apr 1 00:00 - Apr 2 12:00 = 36 h x 2 = 72; 302: running, counted up to
    //             now but within the period: Apr 29 00:00 - May 1 00:00 = 48 h x 1 = 48; 120
    //   sampled   301: 36 h of April on each GPU = 72 (its 12 h of March on each are not in the
    //             period); 302: 48 (its sample at May 1 00:00 is not), matched to its run
    //             though the node could not tell the start: 120
    //   idle      301's GPU c2: 36; c1 at 50 % and 302 at 20 %: 0 -> 36
    //   unsampled 0; idle share 36 / 120 = 30 %; worst: 301 (36)
    // bob, training: 202: allocated 6, sampled 6, idle 6 (1 %), 100 %; worst 202 (6).
    // bob, agents: 201: allocated 4 x 24 = 96, sampled 96, idle 0, 0 %; no worst run.
    // Order: the most idle first: alice 49, carol 36, bob/training 6, bob/agents 0.
    let expected: [Expected; 4] = [
        (
            "alice",
            "agents",
            4,
            132.0,
            126.0,
            49.0,
            6.0,
            &[("90_2", 24.0), ("101", 20.0), ("103", 4.0)],
        ),
        (
            "carol",
            "training",
            2,
            120.0,
            120.0,
            36.0,
            0.0,
            &[("301", 36.0)],
        ),
        ("bob", "training", 1, 6.0, 6.0, 6.0, 0.0, &[("202", 6.0)]),
        ("bob", "agents", 1, 96.0, 96.0, 0.0, 0.0, &[]),
    ];
    assert_eq!(r.users.len(), expected.len(), "{:#?}", r.users);
    for (u, &(user, team, jobs, allocated, sampled, idle, unsampled, worst)) in
        r.users.iter().zip(&expected)
    {
        let s = &u.sums;
        let got = (
            u.user.as_str(),
            u.team.as_str(),
            s.jobs,
            s.gpu_hours(),
            s.sampled_gpu_hours(),
        );
        assert_eq!(got, (user, team, jobs, allocated, sampled), "{u:#?}");
        assert_eq!(
            (s.idle_gpu_hours(), s.unsampled_gpu_hours()),
            (idle, unsampled),
            "{u:#?}"
        );
        assert_eq!(s.idle_percent(), Some(idle / allocated * 100.0), "{u:#?}");
        let named: Vec<(&str, f64)> = u
            .worst
            .iter()
            .map(|w| (w.job_id.as_str(), w.time.idle_gpu_hours()))
            .collect();
        assert_eq!(named, worst, "{u:#?}");
    }
    // Job 999 (not in sacct): 3 GPU-hours sampled, all idle, no user. The free GPU: no job, in
    // no figure of this report.
    assert_eq!(r.unattributed.sampled_gpu_hours(), 3.0);
    assert_eq!(r.unattributed.idle_gpu_hours(), 3.0);
    // Per team: agents 132 + 96 = 228 allocated, 49 idle, busy 126 - 49 + 96 = 173;
    // training 120 + 6 = 126 allocated, 42 idle, busy 120 - 36 + 0 = 84.
    let teams = r.team_sums();
    let agents = teams["agents"];
    assert_eq!(
        (
            agents.gpu_hours(),
            agents.idle_gpu_hours(),
            agents.busy_gpu_hours()
        ),
        (228.0, 49.0, 173.0)
    );
    let training = teams["training"];
    assert_eq!(
        (
            training.gpu_hours(),
            training.idle_gpu_hours(),
            training.busy_gpu_hours()
        ),
        (126.0, 42.0, 84.0)
    );
}

#[test]
fn a_month_of_users_as_table_csv_and_json() {
    let (store, p) = april();
    let r = users_report(&store, &p).unwrap();
    // The figures of `a_month_of_users_computed_by_hand`: hours to 4 decimals, the idle share
    // to 1 in the table (49 / 132 = 37.1 %) and 2 in CSV (37.12).
    assert_eq!(
        render_users(&r, Format::Table, None, &Utc),
        "\
Idle GPU-hours per user (idle: under 5 %) on c from 2024-04-01 00:00:00 to 2024-05-01 00:00:00 (local time)
USER   TEAM      JOBS  GPU-HOURS   SAMPLED  IDLE-GPU-HOURS  IDLE%  UNSAMPLED  WORST-JOBS                                   IDLE-POLICY
alice  agents       4   132.0000  126.0000         49.0000   37.1     6.0000  90_2 (24.0000), 101 (20.0000), 103 (4.0000)  notice 2, requeue 1, cleared 1
carol  training     2   120.0000  120.0000         36.0000   30.0     0.0000  301 (36.0000)                                -
bob    training     1     6.0000    6.0000          6.0000  100.0     0.0000  202 (6.0000)                                 -
bob    agents       1    96.0000   96.0000          0.0000    0.0     0.0000                                               -
IDLE%: idle GPU-hours over allocated GPU-hours. UNSAMPLED: allocated GPU-hours without samples, never counted as idle.
WORST-JOBS: each user's job runs with the most idle GPU-hours (their idle GPU-hours).
IDLE-POLICY: what [governance.idle_policy] did to the user's jobs in the period (notices, requeues...).
Job runs sacct has not brought in yet (no user): 3.0000 GPU-hours sampled, 3.0000 idle.
"
    );
    assert_eq!(
        render_users(&r, Format::Csv, None, &Utc),
        "\
user,team,jobs,gpu_hours,sampled_gpu_hours,idle_gpu_hours,idle_percent,unsampled_gpu_hours,worst_job_1,worst_job_1_idle_gpu_hours,worst_job_2,worst_job_2_idle_gpu_hours,worst_job_3,worst_job_3_idle_gpu_hours,idle_policy_notices,idle_policy_reclaim_first,idle_policy_requeues,idle_policy_cancels,since,until
alice,agents,4,132.0000,126.0000,49.0000,37.12,6.0000,90_2,24.0000,101,20.0000,103,4.0000,2,0,1,0,2024-04-01T00:00:00Z,2024-05-01T00:00:00Z
carol,training,2,120.0000,120.0000,36.0000,30.00,0.0000,301,36.0000,,,,,0,0,0,0,2024-04-01T00:00:00Z,2024-05-01T00:00:00Z
bob,training,1,6.0000,6.0000,6.0000,100.00,0.0000,202,6.0000,,,,,0,0,0,0,2024-04-01T00:00:00Z,2024-05-01T00:00:00Z
bob,agents,1,96.0000,96.0000,0.0000,0.00,0.0000,,,,,,,0,0,0,0,2024-04-01T00:00:00Z,2024-05-01T00:00:00Z
"
    );
    // At most N users: the most idle ones.
    let top = render_users(&r, Format::Csv, Some(1), &Utc);
    assert_eq!(
        top.lines().skip(1).map(|l| &l[..12]).collect::<Vec<_>>(),
        ["alice,agents"]
    );
    // JSON: full precision, the worst runs with their allocated and sampled GPU-hours too.
    let json: serde_json::Value =
        serde_json::from_str(&render_users(&r, Format::Json, None, &Utc)).unwrap();
    let (since, until) = ("2024-04-01T00:00:00Z", "2024-05-01T00:00:00Z");
    let worst = |job: &str, raw: u32, allocated: f64, sampled: f64, idle: f64| {
        serde_json::json!({"job": job, "job_id_raw": raw, "gpu_hours": allocated,
            "sampled_gpu_hours": sampled, "idle_gpu_hours": idle})
    };
    assert_eq!(
        json,
        serde_json::json!([
            {"user": "alice", "team": "agents", "jobs": 4, "gpu_hours": 132.0,
             "sampled_gpu_hours": 126.0, "idle_gpu_hours": 49.0,
             "idle_percent": 49.0 / 132.0 * 100.0, "unsampled_gpu_hours": 6.0,
             "worst_jobs": [worst("90_2", 102, 24.0, 24.0, 24.0), worst("101", 101, 96.0, 96.0, 20.0),
                            worst("103", 103, 10.0, 4.0, 4.0)],
             "idle_policy": {"notice": 2, "requeue": 1, "cleared": 1},
             "since": since, "until": until},
            {"user": "carol", "team": "training", "jobs": 2, "gpu_hours": 120.0,
             "sampled_gpu_hours": 120.0, "idle_gpu_hours": 36.0, "idle_percent": 30.0,
             "unsampled_gpu_hours": 0.0, "worst_jobs": [worst("301", 301, 72.0, 72.0, 36.0)],
             "idle_policy": {}, "since": since, "until": until},
            {"user": "bob", "team": "training", "jobs": 1, "gpu_hours": 6.0,
             "sampled_gpu_hours": 6.0, "idle_gpu_hours": 6.0, "idle_percent": 100.0,
             "unsampled_gpu_hours": 0.0, "worst_jobs": [worst("202", 202, 6.0, 6.0, 6.0)],
             "idle_policy": {}, "since": since, "until": until},
            {"user": "bob", "team": "agents", "jobs": 1, "gpu_hours": 96.0,
             "sampled_gpu_hours": 96.0, "idle_gpu_hours": 0.0, "idle_percent": 0.0,
             "unsampled_gpu_hours": 0.0, "worst_jobs": [], "idle_policy": {},
             "since": since, "until": until},
        ])
    );
}

#[test]
fn each_day_of_the_month_adds_up_to_the_month() {
    let (store, p) = april();
    let month = users_report(&store, &p).unwrap();
    let days = users_report_by_day(&store, &p, &Utc).unwrap();
    assert_eq!(days.len(), 30);
    // Apr 1: 101 ran all day on 2 GPUs (48 allocated, 10 h x 2 idle = 20), 301 too (48, c2's
    // 24 idle).
    let apr1 = days[0].team_sums();
    assert_eq!(
        (apr1["agents"].gpu_hours(), apr1["agents"].idle_gpu_hours()),
        (48.0, 20.0)
    );
    assert_eq!(
        (
            apr1["training"].gpu_hours(),
            apr1["training"].idle_gpu_hours()
        ),
        (48.0, 24.0)
    );
    // Apr 20: 103's 10 GPU-hours, 4 sampled and idle, 6 unsampled.
    let apr20 = days[19].team_sums();
    let agents = apr20["agents"];
    assert_eq!(
        (
            agents.gpu_hours(),
            agents.idle_gpu_hours(),
            agents.unsampled_gpu_hours(),
            agents.busy_gpu_hours()
        ),
        (10.0, 4.0, 6.0, 0.0)
    );
    for team in ["agents", "training"] {
        let sum = |f: fn(&IdleSums) -> f64| -> f64 {
            days.iter()
                .filter_map(|d| d.team_sums().get(team).map(f))
                .sum()
        };
        let whole = month.team_sums()[team];
        assert_eq!(sum(IdleSums::gpu_hours), whole.gpu_hours(), "{team}");
        assert_eq!(
            sum(IdleSums::idle_gpu_hours),
            whole.idle_gpu_hours(),
            "{team}"
        );
        assert_eq!(
            sum(IdleSums::unsampled_gpu_hours),
            whole.unsampled_gpu_hours(),
            "{team}"
        );
    }
}

#[test]
fn what_the_idle_policy_did_is_counted_per_user_and_team() {
    let (store, p) = april();
    let r = users_report(&store, &p).unwrap();
    let policy = |user: &str, team: &str| {
        r.users
            .iter()
            .find(|u| u.user == user && u.team == team)
            .map(|u| u.policy.clone())
    };
    // alice in agents: two notices (101, 90_2), a requeue (101), a notice taken back (90_2).
    assert_eq!(
        policy("alice", "agents"),
        Some(BTreeMap::from([
            ("cleared".to_string(), 1),
            ("notice".to_string(), 2),
            ("requeue".to_string(), 1)
        ]))
    );
    // bob's notice was on March 31: before the period. dave ran nothing in April: no row.
    assert_eq!(policy("bob", "training"), Some(BTreeMap::new()));
    assert!(r.users.iter().all(|u| u.user != "dave"));
}
