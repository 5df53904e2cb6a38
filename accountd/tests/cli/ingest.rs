//! `accountd ingest`.

use super::*;

#[test]
fn ingest_runs_sacct_and_is_idempotent() {
    let site = Site::new(CONFIG);
    let malformed = "7|7|testcluster|agents|alice|gpu|normal|COMPLETED|x\n";
    site.fake("sacct", &format!("{SACCT_FIXTURE}{malformed}"));
    let o = site.run(
        true,
        &[
            "ingest",
            "--since",
            "2024-04-30",
            "--until",
            "2024-05-02T00:00:00",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "7 records read, 6 new, 0 updated, 0 unchanged, 0 never started, 1 malformed skipped"
        ),
        "{err}"
    );
    assert!(err.contains("sacct line 7:"), "{err}");
    assert!(err.contains(malformed.trim()), "{err}");
    let args = site.args_of("sacct");
    for flag in ["-a", "-X", "-D", "-P", "-n", "--noconvert"] {
        assert!(args.iter().any(|a| a == flag), "{flag}: {args:?}");
    }
    let after = |flag: &str| args[args.iter().position(|a| a == flag).unwrap() + 1].clone();
    assert_eq!(after("-M"), "testcluster");
    assert_eq!(after("-S"), "2024-04-30T00:00:00");
    assert_eq!(after("-E"), "2024-05-02T00:00:00");

    let again = site.run(
        true,
        &["ingest", "--since", "2024-04-30", "--until", "2024-05-02"],
    );
    assert_eq!(code(&again), 0);
    assert!(stderr(&again).contains("6 unchanged"), "{}", stderr(&again));
    let store = Store::open(&site.path("accountd.db")).unwrap();
    let n: i64 = store
        .connection()
        .query_row("SELECT count(*) FROM job_runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 6);
}

#[test]
fn ingest_without_slurm_conf_says_so() {
    let site = Site::new(CONFIG);
    let o = site.run(false, &["ingest"]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("SLURM_CONF is not set"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn ingest_reports_a_failing_sacct() {
    let site = Site::new(CONFIG);
    let bin = site.path("bin").join("sacct");
    fs::write(&bin, "#!/bin/sh\necho 'sacct: error: Problem talking to the database: Connection refused' >&2\nexit 1\n").unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let o = site.run(true, &["ingest"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("Connection refused"), "{}", stderr(&o));
}

#[test]
fn a_sacct_that_fails_after_printing_records_leaves_nothing_stored() {
    let site = Site::new(CONFIG);
    fs::write(site.path("sacct.out"), SACCT_FIXTURE).unwrap();
    let bin = site.path("bin").join("sacct");
    fs::write(
        &bin,
        format!(
            "#!/bin/sh\ncat '{}'\necho 'sacct: error: slurmdbd went away' >&2\nexit 1\n",
            site.path("sacct.out").display()
        ),
    )
    .unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let o = site.run(
        true,
        &["ingest", "--since", "2024-04-30", "--until", "2024-05-02"],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("slurmdbd went away"), "{}", stderr(&o));
    // The records it printed before failing were not kept, and the watermark did not move.
    let store = Store::open(&site.path("accountd.db")).unwrap();
    let n: i64 = store
        .connection()
        .query_row("SELECT count(*) FROM job_runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(store.watermark("testcluster").unwrap(), None);
}

#[test]
fn a_line_that_is_not_utf8_is_skipped_and_the_rest_stored() {
    let site = Site::new(CONFIG);
    site.fake("sacct", "");
    let mut out = SACCT_FIXTURE.as_bytes().to_vec();
    out.extend_from_slice(b"8|8|testcluster|agents|al\xffce|gpu|normal|COMPLETED|x\n");
    fs::write(site.path("sacct.out"), out).unwrap();
    let o = site.run(
        true,
        &["ingest", "--since", "2024-04-30", "--until", "2024-05-02"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("7 records read, 6 new"), "{err}");
    assert!(err.contains("sacct line 7: the line is not UTF-8"), "{err}");
    assert!(err.contains("al\u{fffd}ce"), "{err}");
}
