use super::*;

pub(super) const NOW: i64 = 1_796_008_620;

/// The live cluster's rules: capacity 8, quotas 2 + 4 + 2 (nothing unallocated).
pub(super) const CONFIG: &str = "\
[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n\n\
[[team]]\nname = \"agents\"\nquota = 2\nborrow_limit = 2\nweight = 40\n\n\
[[team]]\nname = \"training\"\nquota = 4\nborrow_limit = 4\nweight = 40\n\n\
[[team]]\nname = \"research\"\nquota = 2\nborrow_limit = 6\nweight = 20\n\n\
[[priority_class]]\nname = \"inference\"\nvalue = 100\npreemptible = false\n\n\
[governance]\nstate_max_age = \"5s\"\n";

pub(super) fn config(text: &str) -> Config {
    teamshare_config::parse(text, "t.toml").expect("valid")
}

pub(super) fn job(id: u64, team: &str, phase: Phase) -> ClusterJob {
    ClusterJob {
        priority: 1000,
        submit: NOW - 100,
        ..crate::test_support::job(id, team, phase, NOW - 50)
    }
}

pub(super) fn running(ids: std::ops::Range<u64>, team: &str) -> Vec<ClusterJob> {
    ids.map(|id| job(id, team, Phase::Running)).collect()
}

pub(super) fn capacity(per_node: &[(&str, u32)]) -> Capacity {
    Capacity {
        total: per_node.iter().map(|(_, n)| n).sum(),
        usable_nodes: per_node.len(),
        per_node: per_node.iter().map(|(n, g)| (n.to_string(), *g)).collect(),
        ..Capacity::default()
    }
}

/// The state the governor would publish for these jobs.
pub(super) fn planned(config: &Config, cap: &Capacity, jobs: &[ClusterJob]) -> PublishedState {
    crate::test_support::plan(config, cap, jobs, NOW).state
}

fn run(
    config: &Config,
    state: Result<&PublishedState, String>,
    cap: &Capacity,
    jobs: &[ClusterJob],
    reasons: &[(u64, &str)],
    team: Option<&str>,
) -> Option<Status> {
    let reasons: BTreeMap<u64, String> =
        reasons.iter().map(|(id, r)| (*id, r.to_string())).collect();
    status(
        &StatusInput {
            config,
            state_file: Path::new("/etc/slurm/state.json"),
            state,
            capacity: cap,
            jobs,
            reasons: &reasons,
            now: NOW,
            view_may_be_partial: false,
        },
        team,
    )
}

fn team<'a>(s: &'a Status, name: &str) -> &'a TeamStatus {
    s.teams.iter().find(|t| t.team == name).expect("team row")
}

/// The cells of the table line that starts with `first`.
fn table_line(text: &str, first: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .find(|cells| cells.first().map(String::as_str) == Some(first))
        .unwrap_or_else(|| panic!("no line for {first} in\n{text}"))
}

/// training borrows 3 GPUs beyond its quota of 4, on agents' 2 idle GPUs and research's 1
/// (research runs 1 of its 2); its 8th job waits for GPUs to borrow, and an agents job
/// waits for a dependency.
pub(super) fn borrowing_cluster() -> (Config, Capacity, Vec<ClusterJob>) {
    let config = config(CONFIG);
    let cap = capacity(&[("n1", 4), ("n2", 4)]);
    let mut jobs = running(1..8, "training");
    jobs.extend(running(8..9, "research"));
    jobs.push(job(20, "training", Phase::Pending));
    let mut dependent = job(21, "agents", Phase::Pending);
    dependent.eligible = false;
    jobs.push(dependent);
    (config, cap, jobs)
}

/// Issue 25, finding 12: under `PrivateData=jobs` a user sees only their own jobs; status
/// said "in use 4, free 8" where root saw "in use 12, free 0". The governor's current
/// state fills in the cluster-wide figures, and the output says the view is partial.
#[test]
fn issue25_12_a_partial_view_takes_the_governors_cluster_wide_figures() {
    let (config, cap, jobs) = borrowing_cluster();
    let state = planned(&config, &cap, &jobs);
    // research's user sees its one job only.
    let seen: Vec<ClusterJob> = jobs
        .iter()
        .filter(|j| j.team == "research")
        .cloned()
        .collect();
    let reasons: BTreeMap<u64, String> = BTreeMap::new();
    let input = |partial| StatusInput {
        config: &config,
        state_file: Path::new("/etc/slurm/state.json"),
        state: Ok(&state),
        capacity: &cap,
        jobs: &seen,
        reasons: &reasons,
        now: NOW,
        view_may_be_partial: partial,
    };
    let s = status(&input(true), None).unwrap();
    assert_eq!((s.capacity, s.in_use, s.free), (8, 8, 0));
    assert_eq!(s.partial_view, Some(1));
    let f = &team(&s, "training").figures;
    assert_eq!((f.in_use, f.in_quota, f.borrowed), (7, 4, 3));
    let text = render_table(&s, &chrono::Utc);
    assert!(
        text.contains("GPUs: capacity 8, in use 8, free 0\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "your view of Slurm's jobs is partial, PrivateData: the jobs you can see hold 1 GPUs"
        ),
        "{text}"
    );
    // Root sees everything: its own reading stands, nothing is said.
    let s = status(&input(false), None).unwrap();
    assert_eq!((s.in_use, s.partial_view), (1, None));
    // A full view that matches the state says nothing either.
    let all = StatusInput {
        jobs: &jobs,
        ..input(true)
    };
    assert_eq!(status(&all, None).unwrap().partial_view, None);
}

#[test]
fn a_borrowing_team_its_lenders_and_why_jobs_wait() {
    let (config, cap, jobs) = borrowing_cluster();
    let state = planned(&config, &cap, &jobs);
    let reasons = [(20, "AssocGrpGRES"), (21, "Dependency")];
    let s = run(&config, Ok(&state), &cap, &jobs, &reasons, None).unwrap();

    assert_eq!((s.capacity, s.in_use, s.free), (8, 8, 0));
    assert!(s.state.current, "{:?}", s.state);
    assert_eq!(s.state.age_secs, Some(0));
    let names: Vec<&str> = s.teams.iter().map(|t| t.team.as_str()).collect();
    assert_eq!(names, ["agents", "research", "training"]);

    let training = team(&s, "training");
    let f = &training.figures;
    assert_eq!((f.quota, f.in_use, f.in_quota, f.borrowed), (4, 7, 4, 3));
    // The governor gives training nothing more to borrow: it holds what it may.
    assert_eq!(f.may_hold, Some(7));
    assert_eq!(f.lent, 0.0);
    assert_eq!((f.waiting_jobs, f.waiting_gpus), (1, 1));
    assert_eq!(
        training.waiting_reasons,
        [WaitReason {
            reason: "teamshare: waiting for idle GPUs to borrow (may hold 7 now)".into(),
            jobs: 1,
            gpus: 1,
        }]
    );

    // Borrowed 3 = lent by agents (2 idle) and research (1 idle), pro rata.
    let agents = team(&s, "agents");
    assert_eq!(agents.figures.lent, 2.0);
    assert_eq!(agents.figures.in_use, 0);
    assert_eq!(agents.figures.may_hold, Some(2));
    assert_eq!(
        agents.waiting_reasons,
        [WaitReason {
            reason: "Slurm: Dependency".into(),
            jobs: 1,
            gpus: 1,
        }]
    );
    let research = team(&s, "research");
    assert_eq!((research.figures.in_use, research.figures.in_quota), (1, 1));
    assert_eq!(research.figures.lent, 1.0);
    assert_eq!((s.pool.unallocated, s.pool.lent), (0, 0.0));

    let text = render_table(&s, &chrono::Utc);
    let header = table_line(&text, "TEAM");
    assert_eq!(
        header,
        [
            "TEAM",
            "QUOTA",
            "IN-USE",
            "IN-QUOTA",
            "BORROWED",
            "MAY-HOLD",
            "LENT",
            "WAITING-JOBS",
            "WAITING-GPUS"
        ]
    );
    assert_eq!(
        table_line(&text, "training"),
        ["training", "4", "7", "4", "3", "7", "0", "1", "1"]
    );
    assert_eq!(
        table_line(&text, "agents"),
        ["agents", "2", "0", "0", "0", "2", "2", "1", "1"]
    );
    assert_eq!(
        table_line(&text, "(pool)"),
        ["(pool)", "0", "-", "-", "-", "-", "0", "-", "-"]
    );
    assert!(
        text.contains("GPUs: capacity 8, in use 8, free 0\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "governor state: published 0 s ago (2026-11-30 03:17:00), current (stale after 5 s)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "  training: 1 job (1 GPU): teamshare: waiting for idle GPUs to borrow (may hold 7 now)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("  agents: 1 job (1 GPU): Slurm: Dependency\n"),
        "{text}"
    );

    // JSON: the figures flat on each team, as the table shows them.
    let v = serde_json::to_value(&s).unwrap();
    let t = v["teams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["team"] == "training")
        .unwrap();
    assert_eq!(t["borrowed"], 3);
    assert_eq!(t["may_hold"], 7);
    assert_eq!(t["borrow_limit"], 4);
    assert_eq!(t["waiting_reasons"][0]["gpus"], 1);
    assert_eq!(v["free"], 0);
    assert_eq!(v["state"]["current"], true);
    assert!(v.get("by_type").is_none() && v.get("other_accounts").is_none());
}

#[test]
fn teamshares_reasons_borrow_limit_in_quota_and_parking() {
    let config = config(CONFIG);
    let cap = capacity(&[("n1", 4), ("n2", 4)]);
    // agents holds 4 (2 borrowed): a 5th GPU is beyond quota + borrow limit.
    let mut jobs = running(1..5, "agents");
    jobs.push(job(30, "agents", Phase::Pending));
    // research holds 1 of its 2: a 1-GPU job fits its quota (Slurm has yet to start it);
    // a 2-task array record of 1 GPU each does not, and waits for GPUs to borrow.
    jobs.extend(running(5..6, "research"));
    jobs.push(job(31, "research", Phase::Pending));
    let mut array = job(32, "research", Phase::Pending);
    array.tasks = 2;
    jobs.push(array);
    // A non-preemptible training job the governor parked.
    let mut parked = job(33, "training", Phase::Pending);
    parked.park_held = true;
    parked.eligible = false;
    parked.priority = 0;
    jobs.push(parked);
    let state = planned(&config, &cap, &jobs);
    let reasons = [
        (30, "AssocGrpGRES"),
        (31, "Resources"),
        (32, "Priority"),
        (33, "JobHeldAdmin"),
    ];
    let s = run(&config, Ok(&state), &cap, &jobs, &reasons, None).unwrap();

    let agents = team(&s, "agents");
    assert_eq!(
        agents.waiting_reasons[0].reason,
        "teamshare: beyond quota + borrow limit (4 GPUs)"
    );
    assert_eq!(agents.figures.borrowed, 2);
    let research = team(&s, "research");
    assert_eq!(
        (research.figures.waiting_jobs, research.figures.waiting_gpus),
        (3, 3)
    );
    // The most jobs first.
    assert_eq!(research.waiting_reasons.len(), 2);
    assert_eq!(research.waiting_reasons[0].jobs, 2);
    assert_eq!(
        research.waiting_reasons[1].reason,
        "in quota (Slurm: Resources)"
    );
    let training = team(&s, "training");
    assert_eq!(
        training.waiting_reasons[0].reason,
        "teamshare: parked (non-preemptible, waits for room in its quota)"
    );
}

#[test]
fn a_stale_state_is_flagged_and_its_limits_still_shown() {
    let (config, cap, jobs) = borrowing_cluster();
    let mut state = planned(&config, &cap, &jobs);
    state.generated_at = NOW - 60;
    let s = run(&config, Ok(&state), &cap, &jobs, &[], None).unwrap();
    assert!(!s.state.current);
    assert_eq!(s.state.age_secs, Some(60));
    let problem = s.state.problem.clone().unwrap();
    assert!(
        problem.starts_with("stale: published 60 s ago, more than state_max_age (5 s)"),
        "{problem}"
    );
    // Slurm keeps the last limits the governor set.
    assert_eq!(team(&s, "training").figures.may_hold, Some(7));
    let text = render_table(&s, &chrono::Utc);
    assert!(
        text.contains("governor state: published 60 s ago (2026-11-30 03:16:00): NOT CURRENT: /etc/slurm/state.json stale: published 60 s ago"),
        "{text}"
    );
    assert!(
        text.contains("MAY-HOLD shows the limits the governor last set"),
        "{text}"
    );

    // From another teamshare.toml: not current either, whatever its age.
    state.generated_at = NOW;
    state.config_digest = "0123456789abcdef".into();
    let s = run(&config, Ok(&state), &cap, &jobs, &[], None).unwrap();
    assert!(!s.state.current);
    assert!(s.state.problem.unwrap().contains("another teamshare.toml"));
}

#[test]
fn a_missing_or_unreadable_state_is_said_and_the_rest_still_shown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let missing = read_state(&path).unwrap_err();
    assert!(
        missing.starts_with("not published: no such file"),
        "{missing}"
    );
    std::fs::write(&path, "{\"version\": 3").unwrap();
    assert!(read_state(&path)
        .unwrap_err()
        .starts_with("unreadable state"));
    std::fs::create_dir(dir.path().join("dir.json")).unwrap();
    assert!(read_state(&dir.path().join("dir.json"))
        .unwrap_err()
        .starts_with("cannot be read: it is a directory"));

    let (config, cap, jobs) = borrowing_cluster();
    let s = run(&config, Err(missing), &cap, &jobs, &[], None).unwrap();
    assert!(!s.state.current);
    assert_eq!((s.state.published_at, s.state.age_secs), (None, None));
    assert!(s.teams.iter().all(|t| t.figures.may_hold.is_none()));
    // What Slurm says holds without the state.
    assert_eq!(team(&s, "training").figures.borrowed, 3);
    // Without a limit to compare with, the waiting job shows Slurm's reason.
    assert_eq!(
        team(&s, "training").waiting_reasons[0].reason,
        "Slurm: None"
    );
    let text = render_table(&s, &chrono::Utc);
    assert!(
        text.contains(
            "governor state: none: NOT CURRENT: /etc/slurm/state.json not published: no such file"
        ),
        "{text}"
    );
    assert!(text.contains("MAY-HOLD is unknown without the governor's state"));
    assert_eq!(table_line(&text, "training")[5], "-");
    // The same state, after a pass, as JSON: a null where the table has "-".
    let v = serde_json::to_value(&s).unwrap();
    assert!(v["teams"][0]["may_hold"].is_null());
    assert!(v["state"]["problem"]
        .as_str()
        .unwrap()
        .contains("no such file"));
}

#[test]
fn one_team_and_no_such_team() {
    let (config, cap, jobs) = borrowing_cluster();
    let state = planned(&config, &cap, &jobs);
    let s = run(&config, Ok(&state), &cap, &jobs, &[], Some("research")).unwrap();
    assert_eq!(s.teams.len(), 1);
    assert_eq!(s.teams[0].team, "research");
    // The cluster's figures stay the whole cluster's.
    assert_eq!(s.in_use, 8);
    assert!(run(&config, Ok(&state), &cap, &jobs, &[], Some("nosuch")).is_none());
}

#[test]
fn lending_is_shared_pro_rata_and_accounts_outside_teams_are_listed() {
    // Capacity 10: 2 GPUs no quota holds. agents borrows 2 (4 running) and an account
    // that is no team holds 1 (all borrowed): the lenders are training's 4 idle GPUs,
    // research's 2 and the pool's 2, so 3 borrowed are lent 3 x 4/8, 3 x 2/8, 3 x 2/8.
    let config = config(CONFIG);
    let cap = capacity(&[("n1", 4), ("n2", 4), ("n3", 2)]);
    let mut jobs = running(1..5, "agents");
    jobs.extend(running(5..6, "stray"));
    jobs.push(job(7, "stray", Phase::Pending));
    let state = planned(&config, &cap, &jobs);
    let s = run(&config, Ok(&state), &cap, &jobs, &[], None).unwrap();
    assert_eq!(team(&s, "training").figures.lent, 1.5);
    assert_eq!(team(&s, "research").figures.lent, 0.75);
    assert_eq!((s.pool.unallocated, s.pool.lent), (2, 0.75));
    assert_eq!((s.in_use, s.free), (5, 5));
    assert_eq!(
        s.other_accounts,
        [OtherAccount {
            account: "stray".into(),
            in_use: 1,
            waiting_jobs: 1,
            waiting_gpus: 1,
        }]
    );
    let text = render_table(&s, &chrono::Utc);
    assert_eq!(table_line(&text, "training")[6], "1.5");
    assert_eq!(table_line(&text, "research")[6], "0.75");
    assert!(
        text.contains("account stray is not a team: 1 GPU in use, 1 job (1 GPU) waiting"),
        "{text}"
    );
}

#[test]
fn typed_quotas_have_a_line_per_type() {
    let text = "\
[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n\n\
[gpu_types.h100]\nrate_per_hour = 4.0\n\n[gpu_types.a100]\nrate_per_hour = 2.0\n\n\
[[team]]\nname = \"agents\"\nquota = { h100 = 2 }\nborrow_limit = 4\n\n\
[[team]]\nname = \"training\"\nquota = { a100 = 6 }\nborrow_limit = { h100 = 2 }\n\n\
[[team]]\nname = \"research\"\nquota = { h100 = 2, a100 = 2 }\nborrow_limit = { a100 = 4 }\n\n\
[governance]\nstate_max_age = \"5s\"\n";
    let config = config(text);
    let mut cap = capacity(&[("n1", 4), ("n2", 4), ("n3", 4)]);
    cap.by_type = BTreeMap::from([("a100".to_string(), 8), ("h100".to_string(), 4)]);
    for (node, k) in [("n1", "a100"), ("n2", "a100"), ("n3", "h100")] {
        cap.per_node_types
            .insert(node.into(), BTreeMap::from([(k.to_string(), 4)]));
    }
    // training: 6 A100 in quota, 2 H100 borrowed (one named by its node only).
    let mut jobs = running(1..7, "training");
    for j in &mut jobs {
        j.gpu_type = Some("a100".into());
    }
    let mut h = job(7, "training", Phase::Running);
    h.gpu_type = Some("h100".into());
    jobs.push(h);
    let mut by_node = job(8, "training", Phase::Running);
    by_node.nodes = vec!["n3".into()];
    jobs.push(by_node);
    // A third H100 is beyond training's H100 borrow limit.
    let mut more = job(9, "training", Phase::Pending);
    more.gpu_type = Some("h100".into());
    jobs.push(more);
    let state = planned(&config, &cap, &jobs);
    let s = run(&config, Ok(&state), &cap, &jobs, &[], None).unwrap();

    assert_eq!(
        s.by_type["h100"],
        Gpus {
            capacity: 4,
            in_use: 2,
            free: 2
        }
    );
    assert_eq!(
        s.by_type["a100"],
        Gpus {
            capacity: 8,
            in_use: 6,
            free: 2
        }
    );
    let training = team(&s, "training");
    assert_eq!(
        (
            training.figures.in_use,
            training.figures.in_quota,
            training.figures.borrowed
        ),
        (8, 6, 2)
    );
    let types: Vec<(&str, u32, u32)> = training
        .by_type
        .iter()
        .map(|t| (t.gpu_type.as_str(), t.figures.quota, t.figures.borrowed))
        .collect();
    assert_eq!(types, [("a100", 6, 0), ("h100", 0, 2)]);
    assert_eq!(
        training.by_type[1].figures.may_hold,
        state.pools["h100"]
            .teams
            .get("training")
            .map(|t| t.gpu_limit)
    );
    assert_eq!(
        training.waiting_reasons[0].reason,
        "teamshare: beyond quota + borrow limit (2 GPUs)"
    );
    // The H100s training borrows sit on agents' and research's idle H100 quota.
    let lent_h100 = |name: &str| {
        team(&s, name)
            .by_type
            .iter()
            .find(|t| t.gpu_type == "h100")
            .map_or(0.0, |t| t.figures.lent)
    };
    assert_eq!(lent_h100("agents") + lent_h100("research"), 2.0);
    let text = render_table(&s, &chrono::Utc);
    assert_eq!(table_line(&text, "TEAM")[1], "TYPE");
    assert!(
        text.contains("; h100: capacity 4, in use 2, free 2"),
        "{text}"
    );
    let h100_line = text
        .lines()
        .find(|l| l.starts_with("training") && l.contains("h100"))
        .unwrap();
    let cells: Vec<&str> = h100_line.split_whitespace().collect();
    assert_eq!(&cells[..6], ["training", "h100", "0", "2", "0", "2"]);
}

/// Issue 30: a team counting the A100 family in GPU-equivalents is shown per type as the
/// governor's pass splits it: inference's A100's worth is its 7 running slices, 3 more are
/// borrowed on dev's idle A100's worth, which shows them lent.
#[test]
fn a_family_quota_is_shown_as_the_pass_splits_it() {
    let text = "\
[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n\n\
[gpu_types.a100]\nrate_per_hour = 2.8\n\n\
[gpu_types.\"1g.10gb\"]\nslices_of = \"a100\"\ngpus = \"1/7\"\n\n\
[[team]]\nname = \"inference\"\nquota = { a100 = 1 }\nborrow_limit = { a100 = 1 }\n\n\
[[team]]\nname = \"dev\"\nquota = { a100 = 1 }\n\n\
[governance]\nstate_max_age = \"5s\"\n";
    let config = config(text);
    let mut cap = capacity(&[("n1", 7), ("n2", 7)]);
    cap.by_type = BTreeMap::from([("1g.10gb".to_string(), 14)]);
    for node in ["n1", "n2"] {
        cap.per_node_types
            .insert(node.into(), BTreeMap::from([("1g.10gb".to_string(), 7)]));
    }
    let mut jobs = running(1..11, "inference");
    for j in &mut jobs {
        j.gpu_type = Some("1g.10gb".into());
    }
    let split = teamshare_policy::governance::families::split_for(&config, &jobs, &cap.by_type)
        .expect("a family");
    let state = planned(&split, &cap, &jobs);
    let s = run(&config, Ok(&state), &cap, &jobs, &[], None).unwrap();
    let inference = team(&s, "inference");
    let slices = inference
        .by_type
        .iter()
        .find(|t| t.gpu_type == "1g.10gb")
        .expect("a 1g.10gb line");
    assert_eq!(
        (
            slices.figures.quota,
            slices.figures.in_quota,
            slices.figures.borrowed
        ),
        (7, 7, 3)
    );
    let dev_lent: f64 = team(&s, "dev").by_type.iter().map(|t| t.figures.lent).sum();
    assert_eq!(dev_lent, 3.0);
}
