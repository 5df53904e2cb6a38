//! The actuator against [`FakeSlurm`] (issue 26): what it writes for a plan, in which order,
//! and what it leaves alone when Slurm changed since the snapshot, without a cluster.

use super::*;
use crate::slurm_write::{FakeSlurm, Write};
use governance::Phase;

const CONFIG: &str = "[cluster]\nname = \"t\"\npartitions = [\"gpu\"]\n\n\
    [[team]]\nname = \"vision\"\nquota = 2\nborrow_limit = 2\n\n\
    [[team]]\nname = \"speech\"\nquota = 4\nborrow_limit = 4\n\n\
    [governance]\nmin_runtime_before_reclaim = \"0s\"\n";

fn job(id: u64, team: &str, phase: Phase, at: i64, batch: bool) -> ClusterJob {
    ClusterJob {
        priority: 5,
        batch,
        ..crate::test_support::job(id, team, phase, at)
    }
}

/// speech runs 6 on its quota of 4 (job 6 an interactive allocation); vision has waited long
/// for 2 of its quota, so that the plan reclaims; a job of an account outside every team waits
/// too.
fn snapshot() -> (Config, Snapshot) {
    let config = teamshare_config::parse(CONFIG, "t.toml").unwrap();
    let mut jobs: Vec<ClusterJob> = (1..=6)
        .map(|i| job(i, "speech", Phase::Running, 100 + i as i64, i != 6))
        .collect();
    // Waiting since long before the governor's fallback reclaim is due.
    jobs.push(job(20, "vision", Phase::Pending, 500, true));
    jobs.push(job(21, "vision", Phase::Pending, 500, true));
    jobs.push(job(30, "nobody", Phase::Pending, 1_000, true));
    let plan = crate::test_support::plan(&config, &crate::test_support::gpus(6), &jobs, 1_000);
    let work = Snapshot {
        plan,
        jobs,
        addresses: Addresses::new(),
        leaders: Leaders::new(),
        unhold: Vec::new(),
        run_ended_holds: Vec::new(),
        pass: 1,
        idle_events: Vec::new(),
    };
    (config, work)
}

/// The fake's running jobs: those of the snapshot, as they run now (`restarted`: with another
/// start than the snapshot's).
fn fake_of(work: &Snapshot, restarted: &[u64]) -> FakeSlurm {
    let fake = FakeSlurm::default();
    for j in work.jobs.iter().filter(|j| j.phase == Phase::Running) {
        let start = j.start.map(|s| {
            if restarted.contains(&j.id) {
                s + 500
            } else {
                s
            }
        });
        let run = RunningJob {
            start,
            batch: j.batch,
            ..RunningJob::default()
        };
        fake.state().running.insert(j.id.to_string(), (j.id, run));
    }
    fake
}

/// Of the plan's two victims, the one restarted since the snapshot is left alone and the
/// other's run ends (requeued, or cancelled where it is interactive); nothing else ends.
#[test]
fn only_the_run_the_snapshot_saw_is_ended() {
    let (config, work) = snapshot();
    let victims = work.plan.reclaim.clone();
    assert_eq!(victims.len(), 2, "{:?}", work.plan);
    let fake = fake_of(&work, &victims[..1]);
    let (_, report) = Actuator::new(config, Box::new(fake.clone())).act(work);
    assert_eq!(report.skipped, vec![victims[0]]);
    assert_eq!(report.reclaimed, vec![victims[1]]);
    let ended: Vec<Write> = fake
        .state()
        .writes
        .iter()
        .filter(|w| matches!(w, Write::Requeue(..) | Write::Cancel(_)))
        .cloned()
        .collect();
    let name = victims[1].to_string();
    let want = if victims[1] == 6 {
        Write::Cancel(name)
    } else {
        Write::Requeue(name, false)
    };
    assert_eq!(ended, vec![want]);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
}

/// The outside job is marked before it is held (its owner then reads why), and both name it.
#[test]
fn a_job_outside_every_team_is_marked_then_held() {
    let (config, work) = snapshot();
    let fake = fake_of(&work, &[]);
    let (_, report) = Actuator::new(config, Box::new(fake.clone())).act(work);
    assert_eq!(report.held, vec![30]);
    let writes = fake.state().writes.clone();
    let marked = writes.iter().position(|w| {
        matches!(w, Write::Update(n, u) if n == &["30".to_string()]
            && u.admin_comment.as_deref() == Some(&format!("teamshare: held: {OUTSIDE_HOLD}")))
    });
    let held = writes
        .iter()
        .position(|w| w == &Write::Hold(vec!["30".into()]));
    assert!(
        matches!((marked, held), (Some(m), Some(h)) if m < h),
        "{writes:?}"
    );
}

/// Limits move only when they change; one Slurm refused is not remembered as set and is
/// tried again with the next plan, the others are not.
#[test]
fn a_refused_limit_is_tried_again_and_only_it() {
    let (config, work) = snapshot();
    let fake = fake_of(&work, &[]);
    fake.state().refuse_limits.push("speech".into());
    let limits = |fake: &FakeSlurm| -> Vec<String> {
        let mut state = fake.state();
        let teams = state
            .writes
            .iter()
            .filter_map(|w| match w {
                Write::GrpTres(team, _) => Some(team.clone()),
                _ => None,
            })
            .collect();
        state.writes.clear();
        teams
    };
    let (actuator, report) = Actuator::new(config, Box::new(fake.clone())).act(work);
    assert_eq!(limits(&fake), vec!["speech", "vision"]);
    assert_eq!(report.limit_failures, vec!["speech"]);
    let (_, again) = snapshot();
    let (_, report) = actuator.act(again);
    assert_eq!(limits(&fake), vec!["speech"]);
    assert_eq!(report.limit_failures, vec!["speech"]);
}

/// A pending job still at a level that preempts (a requeued victim keeps its priority) is
/// lowered even when the borrowers' bands spent the pass's budget first: left there, it would
/// preempt the jobs below it once its begin time passes.
#[test]
fn a_job_lowered_from_a_preempting_level_is_not_put_off_by_the_budget() {
    use teamshare_policy::priority::{borrow_band, encode, victim_level, BORROW_BASE};
    let config = teamshare_config::parse(CONFIG, "t.toml").unwrap();
    let band = encode(borrow_band(1, 0), 0);
    // Band moves to a higher priority than the lowering's (written first were the order by
    // priority alone), each update slower than the whole budget.
    let mut jobs: Vec<ClusterJob> = (100..100 + 3 * UPDATE_CHUNK as u64)
        .map(|i| ClusterJob {
            priority: encode(BORROW_BASE, 0),
            ..job(i, "speech", Phase::Pending, 900, true)
        })
        .collect();
    jobs.push(ClusterJob {
        priority: encode(victim_level(3), 0),
        ..job(7, "speech", Phase::Pending, 800, true)
    });
    let mut plan = crate::test_support::plan(&config, &crate::test_support::gpus(6), &jobs, 1_000);
    plan.priorities.clear();
    for j in &jobs {
        let want = if j.id == 7 {
            encode(BORROW_BASE, 0)
        } else {
            band
        };
        plan.priorities.insert(j.id, want);
    }
    let fake = FakeSlurm::default();
    fake.state().update_delay = PRIORITY_BUDGET + Duration::from_millis(10);
    let mut writer = fake.clone();
    let n = apply_priorities(&mut writer, &plan, &jobs, &Addresses::new()).unwrap();
    let writes = fake.state().writes.clone();
    let lowered = |w: &Write| {
        matches!(w, Write::Update(names, u) if names == &["7".to_string()]
        && u.priority == Some(encode(BORROW_BASE, 0)))
    };
    assert!(writes.iter().any(lowered), "{writes:?}");
    // The lowering came first and spent the budget: the bands wait for the next pass.
    assert_eq!(n, 1, "{writes:?}");
}
