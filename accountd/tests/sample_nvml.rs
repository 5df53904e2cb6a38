//! `accountd sample` against the fake NVML library (contrib/fake-nvml) loaded through
//! nvml-wrapper: GPUs keyed by UUID, mapped to jobs by minor number (never NVML's index), and
//! the errors of a missing library or an unreadable GPU.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

mod sample_support;

use std::fs;

use sample_support::{samples_in, Site};

#[test]
fn samples_carry_the_job_of_their_minor_through_slurms_device_order() {
    let site = Site::new();
    let out = site
        .sampler(&["--once", "--interval", "10s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let files = site.ready_files();
    assert_eq!(files.len(), 1, "{stderr}");
    let samples = samples_in(&files);
    let mut held: Vec<(String, Option<u64>, Option<i64>)> = samples
        .iter()
        .map(|s| {
            (
                s["gpu_uuid"].as_str().unwrap().to_string(),
                s["job_id_raw"].as_u64(),
                s["job_start"].as_i64(),
            )
        })
        .collect();
    held.sort();
    // Job 42 holds IDX 0-1 of n1; slurmd lists nvidia3 then nvidia[0-2], so IDX 0 is minor 3
    // (NVML index 0) and IDX 1 is minor 0 (NVML index 3). Job 43 is on another node.
    let job = Some(42);
    let start = Some(sample_support::JOB_START);
    assert_eq!(
        held,
        [
            ("GPU-0000".to_string(), job, start),
            ("GPU-1111".to_string(), None, None),
            ("GPU-2222".to_string(), None, None),
            ("GPU-3333".to_string(), job, start),
        ]
    );
    assert!(samples
        .iter()
        .all(|s| s["ts_ms"].as_i64().unwrap() % 10_000 == 0 && s["node"] == "n1"));
}

#[test]
fn a_missing_library_is_a_clear_error_naming_it_and_its_package() {
    let site = Site::new();
    let missing = site.path("no/libnvidia-ml.so.1");
    let out = site
        .accountd()
        .args(["sample", "--once", "--node", "n1", "--nvml-lib"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    assert!(stderr.contains("libnvidia-ml1"), "{stderr}");
    assert!(stderr.contains("--nvml-lib"), "{stderr}");
    assert!(site.ready_files().is_empty());
}

#[test]
fn a_library_that_is_not_nvml_is_said_so() {
    let site = Site::new();
    // Any shared library without nvmlInit_v2: the C library.
    let libc = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("a libc.so.6 to load");
    let out = site
        .accountd()
        .args(["sample", "--once", "--node", "n1", "--nvml-lib", libc])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not an NVML library"), "{stderr}");
}

#[test]
fn an_unreadable_gpu_is_said_and_the_others_are_sampled() {
    let site = Site::new();
    let script = sample_support::SCRIPT.replace(
        "gpu 1 uuid=GPU-1111",
        "gpu 1 uuid=GPU-1111 fail=utilization",
    );
    fs::write(site.path("script"), script).unwrap();
    let out = site.sampler(&["--once"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("GPU GPU-1111 (NVML index 2): cannot read its utilisation"),
        "{stderr}"
    );
    let samples = samples_in(&site.ready_files());
    let uuids: Vec<&str> = samples
        .iter()
        .map(|s| s["gpu_uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids, ["GPU-3333", "GPU-2222", "GPU-0000"]);
}

/// Issue 30: NVML reads no utilisation of a MIG-enabled GPU (NOT_SUPPORTED, as the fake's
/// `mig=on` answers): the sampler says why in MIG's words, once, and samples the others. A GPU
/// without MIG that cannot say its utilisation (`fail=`) keeps the general message.
#[test]
fn a_mig_enabled_gpu_is_said_to_be_unsampled_and_the_others_are_sampled() {
    let site = Site::new();
    let script =
        sample_support::SCRIPT.replace("gpu 1 uuid=GPU-1111", "gpu 1 uuid=GPU-1111 mig=on");
    assert!(script.contains("mig=on"));
    fs::write(site.path("script"), script).unwrap();
    let out = site.sampler(&["--once"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("GPU GPU-1111 (NVML index 2): is in MIG mode: NVML reads no utilisation"),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot read its utilisation"), "{stderr}");
    let samples = samples_in(&site.ready_files());
    let uuids: Vec<&str> = samples
        .iter()
        .map(|s| s["gpu_uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids, ["GPU-3333", "GPU-2222", "GPU-0000"]);
}

#[test]
fn a_failing_job_lookup_still_samples_every_gpu_with_no_job() {
    let site = Site::new();
    fs::write(
        site.path("bin/scontrol"),
        "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n",
    )
    .unwrap();
    let out = site.sampler(&["--once"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Unable to contact slurm controller"),
        "{stderr}"
    );
    let samples = samples_in(&site.ready_files());
    assert_eq!(samples.len(), 4);
    assert!(samples.iter().all(|s| s["job_id_raw"].is_null()));
}

#[test]
fn two_fake_nodes_on_one_machine_see_their_own_gpus() {
    let site = Site::new();
    let out = site
        .sampler(&["--once", "--no-jobs"])
        .env("FAKE_NVML_DEVICES", "1,2")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples = samples_in(&site.ready_files());
    let uuids: Vec<&str> = samples
        .iter()
        .map(|s| s["gpu_uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids, ["GPU-2222", "GPU-1111"]);
}
