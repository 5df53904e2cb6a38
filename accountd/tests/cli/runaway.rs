//! Runaway runs.

use super::*;

#[test]
fn ingest_clips_a_run_slurmctld_lost_and_the_report_says_so() {
    let site = Site::new(CONFIG);
    site.fake("sacct", SACCT_FIXTURE);
    // Job 2 is RUNNING in the fixture; slurmctld knows only others.
    site.fake_squeue("", "1\n3\n99\n");
    let o = site.run(
        true,
        &["ingest", "--since", "2024-04-30", "--until", "2024-05-02"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "warning: job 2 of agents is RUNNING in sacct but slurmctld no longer knows it"
        ),
        "{err}"
    );
    assert!(err.contains("sacctmgr show runaway"), "{err}");
    let runaway: Vec<String> = site
        .args_of("squeue")
        .into_iter()
        .take_while(|a| a != "--")
        .collect();
    assert_eq!(runaway, ["-h", "-a", "-t", "all", "-o", "%A"]);
    assert_eq!(
        count_rows(
            &site,
            "SELECT count(*) FROM job_runs WHERE runaway AND job_id_raw = 2 AND end_time IS NOT NULL"
        ),
        1
    );
    // The report says so, on stderr, whatever the format.
    let o = site.run(
        false,
        &[&["report", "--format", "csv", "--since", "2024-04-30"][..]].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("note: 1 runaway run was clipped (job 2)"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("`sacctmgr show runaway`"));
    assert!(!stdout(&o).contains("runaway"));
    // A squeue that fails leaves the ingest done, and says why.
    site.script(
        "squeue",
        "echo 'squeue: error: slurmctld down' >&2\nexit 1\n",
    );
    let o = site.run(
        true,
        &["ingest", "--since", "2024-04-30", "--until", "2024-05-02"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot tell runaway runs"),
        "{}",
        stderr(&o)
    );
}
