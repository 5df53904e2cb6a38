//! `accountd check-config`.

use super::*;

#[test]
fn check_config_valid_prints_a_summary_and_exits_0() {
    let site = Site::new(CONFIG);
    let o = site.run(false, &["check-config"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("is valid"), "{out}");
    assert!(out.contains("testcluster"), "{out}");
    assert!(out.contains("2 teams with 6 GPUs of quota"), "{out}");
    assert!(out.contains("agents (quota 2, borrow 2"), "{out}");
    assert!(out.contains("training (quota 4, borrow unlimited"), "{out}");
    assert!(out.contains("inference (100, not preemptible)"), "{out}");
    assert!(stderr(&o).contains("capacity: not checked (SLURM_CONF is not set"));
}

#[test]
fn check_config_invalid_prints_every_error_and_exits_2() {
    let bad = CONFIG
        .replace("weight = 40", "weight = 40\nquotaa = 3")
        .replace("rate_per_hour = 10.0", "rate_per_hour = -1.0");
    let site = Site::new(&bad);
    let o = site.run(false, &["check-config"]);
    assert_eq!(code(&o), 2);
    let err = stderr(&o);
    let errors: Vec<&str> = err.lines().filter(|l| l.contains(": error: ")).collect();
    assert!(errors.len() >= 2, "{err}");
    assert!(
        errors.iter().all(|l| l.contains("teamshare.toml:")),
        "{err}"
    );
    assert!(stdout(&o).is_empty());
}

#[test]
fn check_config_missing_file_is_a_runtime_error() {
    let site = Site::new(CONFIG);
    let o = Command::new(BIN)
        .args(["--config"])
        .arg(site.path("nope.toml"))
        .arg("check-config")
        .output()
        .unwrap();
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("nope.toml"));
}

#[test]
fn check_config_against_a_given_capacity() {
    let site = Site::new(CONFIG);
    let o = site.run(false, &["check-config", "--capacity", "8"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("capacity: 8 GPUs"));
    let o = site.run(false, &["check-config", "--capacity", "5"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("capacity (5 GPUs)"), "{}", stderr(&o));
}

#[test]
fn check_config_measures_the_capacity_with_sinfo() {
    let site = Site::new(CONFIG);
    site.fake(
        "sinfo",
        "n1|gpu:4|idle\nn2|gpu:4|drain\nn3|gpu:4(S:0-1)|mix\n",
    );
    let o = site.run(true, &["check-config"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("capacity: 8 GPUs on 2 usable nodes"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("n2 (drain)"));
    assert_eq!(
        site.args_of("sinfo"),
        ["-h", "-N", "-p", "gpu", "-o", "%N|%G|%t", "--"]
    );
    // Drained capacity below the quotas: exit 2 with the diagnostic.
    site.fake("sinfo", "n1|gpu:4|idle\nn2|gpu:4|down*\n");
    let o = site.run(true, &["check-config"]);
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    assert!(stderr(&o).contains("error:"));
}

#[test]
fn check_config_without_sinfo_says_so_and_passes() {
    let site = Site::new(CONFIG);
    // SLURM_CONF is set but sinfo fails (no controller).
    let script =
        "#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n";
    let bin = site.path("bin").join("sinfo");
    fs::write(&bin, script).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let o = site.run(true, &["check-config"]);
    assert_eq!(code(&o), 0);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("capacity: not checked (sinfo unavailable"),
        "{err}"
    );
}

#[test]
fn usage_errors_exit_2_and_help_documents_exit_codes() {
    let site = Site::new(CONFIG);
    let o = site.run(false, &["report", "--format", "xml"]);
    assert_eq!(code(&o), 2);
    let o = site.run(false, &["no-such-command"]);
    assert_eq!(code(&o), 2);
    let o = site.run(false, &["--help"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("Exit codes:"));
    assert!(stdout(&o).contains("2  invalid configuration or usage"));
}

/// Issue 30: a slice type shows its size and the rate it costs (its GPU's, times its size).
#[test]
fn check_config_shows_slices_with_their_size_and_rate() {
    let sliced = CONFIG.replace(
        "[gpu_types.h100]\nrate_per_hour = 70.0\n",
        "[gpu_types.h100]\nrate_per_hour = 70.0\n\n[gpu_types.\"1g.10gb\"]\nslices_of = \"h100\"\ngpus = \"1/7\"\n",
    );
    let site = Site::new(&sliced);
    let o = site.run(false, &["check-config"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("1g.10gb 10.00 (1/7 of h100)"), "{out}");
    assert!(out.contains("h100 70.00"), "{out}");
    // A quota naming the sliced type counts its family in GPU-equivalents, and says so.
    let family = sliced
        .replace(
            "quota = 2\n",
            "quota = { h100 = 2 }\nborrow_limit = { h100 = 1 }\n",
        )
        .replace("borrow_limit = 2\n", "")
        .replace("quota = 4\n", "quota = { \"1g.10gb\" = 7 }\n");
    let site = Site::new(&family);
    let o = site.run(false, &["check-config"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("agents (quota 2 (h100 family 2 GPU-equivalents), borrow 1"),
        "{out}"
    );
    assert!(out.contains("training (quota 7 (1g.10gb 7)"), "{out}");
}
