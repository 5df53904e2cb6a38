//! `accountd status`.

use super::*;

#[test]
fn status_reads_slurm_as_the_governor_does_and_says_what_it_lacks() {
    let site = daemon_site();
    // Beside training's 5 GPUs (1 borrowed), an agents job waits for a dependency.
    let pending = "7|agents|PENDING|64000|2024-05-01T10:00:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|Dependency|1||N/A|7|N/A|N/A|*|OK|N/A|N/A|(null)|\n";
    fs::write(site.path("squeue.out"), format!("{SQUEUE_OUT}{pending}")).unwrap();

    // No governor pass yet: no state, said, and everything Slurm tells still shown.
    let o = site.run(true, &["status", "--format", "json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        (v["capacity"].as_u64(), v["in_use"].as_u64()),
        (Some(8), Some(5))
    );
    assert_eq!(v["state"]["current"], false);
    let problem = v["state"]["problem"].as_str().unwrap();
    assert!(
        problem.starts_with("not published: no such file"),
        "{problem}"
    );
    let training = &v["teams"][1];
    assert_eq!(training["team"], "training");
    assert_eq!(
        (training["in_quota"].as_u64(), training["borrowed"].as_u64()),
        (Some(4), Some(1))
    );
    assert!(training["may_hold"].is_null());
    assert_eq!(
        v["teams"][0]["waiting_reasons"][0]["reason"],
        "Slurm: Dependency"
    );

    // After a pass: the limits it set. training borrows 1 GPU of the idle 4 (agents' 2 and
    // the 2 no quota holds): each lends half of it.
    let o = site.run(true, &["govern", "--once"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = site.run(true, &["status"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains(", current (stale after 30 s)\n"), "{text}");
    let line = |first: &str| {
        text.lines()
            .map(cells)
            .find(|c| c[0] == first)
            .unwrap_or_else(|| panic!("no {first} line in {text}"))
    };
    assert_eq!(
        line("training"),
        ["training", "4", "5", "4", "1", "5", "0", "0", "0"]
    );
    assert_eq!(
        line("agents"),
        ["agents", "2", "0", "0", "0", "2", "0.5", "1", "1"]
    );
    assert_eq!(
        line("(pool)"),
        ["(pool)", "2", "-", "-", "-", "-", "0.5", "-", "-"]
    );

    // One team; an unknown team is a usage error, before Slurm is asked anything.
    let o = site.run(true, &["status", "--team", "agents", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["teams"].as_array().unwrap().len(), 1);
    let calls = site.args_of("squeue").len();
    let o = site.run(true, &["status", "--team", "nosuch"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains(
            "--team nosuch: no such team in the configuration (its teams: agents, training)"
        ),
        "{}",
        stderr(&o)
    );
    assert_eq!(site.args_of("squeue").len(), calls);

    // Slurm that cannot be read is a runtime error.
    site.script(
        "squeue",
        "echo 'squeue: error: slurmctld down' >&2\nexit 1\n",
    );
    let o = site.run(true, &["status"]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("cannot read Slurm's jobs and nodes"),
        "{}",
        stderr(&o)
    );
}
