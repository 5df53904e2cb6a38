use super::*;

const CONFIG: &str = "[cluster]\nname = \"c\"\n[[team]]\nname = \"a\"\nquota = 4\n[[priority_class]]\nname = \"interactive\"\nvalue = 10\n";

fn config(policy: &str) -> Config {
    teamshare_config::parse(&format!("{CONFIG}{policy}"), "t.toml").expect("valid")
}

fn running(id: u64, class: u8) -> ClusterJob {
    ClusterJob {
        id,
        team: "a".into(),
        phase: Phase::Running,
        gpus: 1,
        gpu_type: None,
        priority: priority::encode(priority::VICTIM_BASE, class),
        submit: 0,
        start: Some(0),
        eligible: true,
        parked: false,
        park_held: false,
        batch: true,
        nodes: vec!["n1".into()],
        node_count: 1,
        completing: false,
        tasks: 1,
    }
}

/// A window of `secs` for 1-GPU jobs: `(id, sampled seconds, idle seconds)`.
fn window(idleness: &mut Idleness, secs: u64, runs: &[(u64, i64, i64)]) {
    let w = runs
        .iter()
        .map(|&(id, sampled, idle)| {
            let s = SampledWindow {
                samples: u64::try_from(sampled / 10).unwrap_or(0),
                sampled_ms: sampled * 1000,
                idle_ms: idle * 1000,
            };
            ((id, 0), s)
        })
        .collect();
    idleness.windows.insert(Duration::from_secs(secs), w);
}

fn steps(state: &mut IdlePolicyState) -> Vec<(u64, IdleStep)> {
    state
        .take_events()
        .iter()
        .map(|e| (e.job, e.step))
        .collect()
}

/// Notice after `notice_after` idle, the action `act_after` later if still idle over both,
/// once; a busy job and an exempt class never; the notice taken back when the job computes.
#[test]
fn a_job_idle_past_the_threshold_is_noticed_then_acted_on_once() {
    let c = config("[governance.idle_policy]\nnotice_after = \"60s\"\naction = \"requeue\"\nact_after = \"30s\"\nexempt_classes = [\"interactive\"]\n");
    // Job 1 idle, job 2 busy (one busy sample), job 4 idle but interactive.
    let jobs = vec![running(1, 0), running(2, 0), running(4, 1)];
    let mut idleness = Idleness::default();
    window(&mut idleness, 60, &[(1, 60, 60), (2, 60, 50), (4, 60, 60)]);
    let mut state = IdlePolicyState::default();
    state.decide(&c, &jobs, &idleness, 1_000);
    let events = state.take_events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!((events[0].job, events[0].step), (1, IdleStep::Notice));
    // The evidence: the 60 s window, 6 samples, all idle; the action 30 s later.
    assert_eq!(events[0].samples.idle_ms, 60_000);
    assert_eq!(events[0].act_at, Some(1_030));
    state.decide(&c, &jobs, &idleness, 1_010);
    assert!(steps(&mut state).is_empty(), "noticed once");
    // At 1,030 the 90 s window must show it idle since before the notice.
    window(&mut idleness, 90, &[(1, 90, 90), (2, 90, 80), (4, 90, 90)]);
    state.decide(&c, &jobs, &idleness, 1_029);
    assert!(steps(&mut state).is_empty(), "not due before act_after");
    state.decide(&c, &jobs, &idleness, 1_030);
    assert_eq!(steps(&mut state), [(1, IdleStep::Act(IdleAction::Requeue))]);
    state.decide(&c, &jobs, &idleness, 1_040);
    assert!(steps(&mut state).is_empty(), "acted on once");
    // It computes again: the notice is taken back.
    window(&mut idleness, 60, &[(1, 60, 50)]);
    state.decide(&c, &jobs, &idleness, 1_050);
    assert_eq!(steps(&mut state), [(1, IdleStep::Cleared)]);
}

/// Samples that stop make the job unknown: the notice is taken back and nothing follows,
/// even once the action is due.
#[test]
fn a_job_whose_samples_stop_is_never_acted_on() {
    let c = config("[governance.idle_policy]\nnotice_after = \"60s\"\naction = \"cancel\"\nact_after = \"30s\"\n");
    let jobs = vec![running(1, 0)];
    let mut idleness = Idleness::default();
    window(&mut idleness, 60, &[(1, 60, 60)]);
    window(&mut idleness, 90, &[(1, 90, 90)]);
    let mut state = IdlePolicyState::default();
    state.decide(&c, &jobs, &idleness, 1_000);
    assert_eq!(steps(&mut state), [(1, IdleStep::Notice)]);
    // The node's sampler stops: 20 s of the last 60 sampled, less than half.
    window(&mut idleness, 60, &[(1, 20, 20)]);
    window(&mut idleness, 90, &[(1, 50, 50)]);
    state.decide(&c, &jobs, &idleness, 1_040);
    assert_eq!(steps(&mut state), [(1, IdleStep::Cleared)]);
    state.decide(&c, &jobs, &idleness, 1_100);
    assert!(steps(&mut state).is_empty());
    // A job that ended is forgotten; with no policy, nothing is decided.
    let none = config("");
    window(&mut idleness, 60, &[(1, 60, 60)]);
    state.decide(&none, &jobs, &idleness, 1_200);
    assert!(steps(&mut state).is_empty());
}

/// "reclaim-first" puts the job among rule 3's first victims once acted on, and takes it
/// out when it computes again; only the teams listed are covered.
#[test]
fn reclaim_first_marks_the_job_for_rule_3_while_it_stays_idle() {
    let c = config("[[team]]\nname = \"b\"\nquota = 1\n[governance.idle_policy]\nnotice_after = \"60s\"\naction = \"reclaim-first\"\nact_after = \"30s\"\nteams = [\"a\"]\n");
    let mut other = running(2, 0);
    other.team = "b".into();
    let jobs = vec![running(1, 0), other];
    let mut idleness = Idleness::default();
    window(&mut idleness, 60, &[(1, 60, 60), (2, 60, 60)]);
    window(&mut idleness, 90, &[(1, 90, 90), (2, 90, 90)]);
    let mut state = IdlePolicyState::default();
    state.decide(&c, &jobs, &idleness, 1_000);
    assert_eq!(steps(&mut state), [(1, IdleStep::Notice)]);
    assert!(state.reclaim_first(&c).is_empty());
    state.decide(&c, &jobs, &idleness, 1_030);
    assert_eq!(
        steps(&mut state),
        [(1, IdleStep::Act(IdleAction::ReclaimFirst))]
    );
    assert_eq!(state.reclaim_first(&c), BTreeSet::from([1]));
    window(&mut idleness, 60, &[(1, 60, 0)]);
    state.decide(&c, &jobs, &idleness, 1_040);
    assert_eq!(steps(&mut state), [(1, IdleStep::Cleared)]);
    assert!(state.reclaim_first(&c).is_empty());
}

/// Decisions the busy actuator could not take are handed over later, oldest first.
#[test]
fn decisions_put_back_keep_their_order() {
    let c = config("[governance.idle_policy]\nnotice_after = \"60s\"\n");
    let mut idleness = Idleness::default();
    window(&mut idleness, 60, &[(1, 60, 60), (2, 60, 60)]);
    let mut state = IdlePolicyState::default();
    state.decide(&c, &[running(1, 0)], &idleness, 1_000);
    let first = state.take_events();
    state.decide(&c, &[running(1, 0), running(2, 0)], &idleness, 1_010);
    state.put_back(first);
    assert_eq!(
        steps(&mut state),
        [(1, IdleStep::Notice), (2, IdleStep::Notice)]
    );
}
