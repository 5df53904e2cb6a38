//! Generate bindings from the Slurm headers installed on the build machine.
//!
//! The plugin must be built against the exact Slurm it is loaded into: slurmctld refuses a
//! plugin whose `plugin_version` differs from its own `SLURM_VERSION_NUMBER`, and structs such as
//! `job_desc_msg_t` change layout between releases. So nothing here is pre-generated.

use std::env;
use std::path::{Path, PathBuf};

#[path = "src/release.rs"]
mod release;
use release::{release_cfgs, Release, ALL_CFGS};

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=src/release.rs");

    let include_dir = match env::var_os("SLURM_INCLUDE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from("/usr/include"),
    };
    let slurm_h = include_dir.join("slurm/slurm.h");
    if !slurm_h.is_file() {
        fail(&format!(
            "Slurm headers not found: {} does not exist.\n\
             Install them with `apt-get install libslurm-dev` (Debian/Ubuntu), or set \
             SLURM_INCLUDE_DIR to the directory that holds slurm/slurm.h.",
            slurm_h.display()
        ));
    }
    let release = release_of(&include_dir.join("slurm/slurm_version.h"));
    announce(&release);
    for h in [
        "slurm/slurm.h",
        "slurm/slurm_errno.h",
        "slurm/slurm_version.h",
    ] {
        println!("cargo:rerun-if-changed={}", include_dir.join(h).display());
    }

    let bindings = generate(&include_dir);
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    write(&bindings, &out.join("bindings.rs"));
}

/// What the dependents build for (DEP_SLURM_* in their build scripts, the way nginx-sys tells
/// ngx-rust which nginx it found): the version number and the cfgs that name what differs
/// between releases. This table is the one place that knows those differences.
fn announce(release: &Release) {
    println!("cargo:version_number={:#08x}", release.number);
    println!("cargo:release={}.{:02}", release.major, release.minor);
    let cfgs = release_cfgs(release);
    println!("cargo:cfgs={}", cfgs.join(","));
    println!("cargo:all_cfgs={}", ALL_CFGS.join(","));
    for cfg in ALL_CFGS {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
    }
    for cfg in &cfgs {
        println!("cargo:rustc-cfg={cfg}");
    }
}

/// The bindings to the headers under `include_dir`, or the end of the build with the reason.
fn generate(include_dir: &Path) -> bindgen::Bindings {
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg(format!("-I{}", include_dir.display()))
        // Only what the project uses: the submit request, versions, error codes, NO_VAL.
        .allowlist_type("job_desc_msg_t")
        .allowlist_var("SLURM_VERSION_NUMBER")
        .allowlist_var("NO_VAL")
        .allowlist_var("NO_VAL16")
        .allowlist_var("JOB_SHARED_.*")
        .allowlist_var("NO_VAL64")
        .allowlist_var("INFINITE")
        .allowlist_var("NICE_OFFSET")
        .allowlist_var("SLURM_SUCCESS")
        .allowlist_var("SLURM_ERROR")
        .allowlist_type("slurm_err_t")
        // accountd's governor reads jobs, nodes and partitions in process (libslurm).
        .allowlist_function("slurm_init")
        .allowlist_function("slurm_load_jobs")
        .allowlist_function("slurm_free_job_info_msg")
        .allowlist_function("slurm_load_node")
        .allowlist_function("slurm_free_node_info_msg")
        .allowlist_function("slurm_load_partitions")
        .allowlist_function("slurm_free_partition_info_msg")
        .allowlist_function("slurm_strerror")
        .allowlist_type("job_info_msg_t")
        .allowlist_type("node_info_msg_t")
        .allowlist_type("partition_info_msg_t")
        // slurmctld's counters of job events (sdiag's): the governor's cheap check for change.
        .allowlist_function("slurm_get_statistics")
        .allowlist_type("stats_info_request_msg_t")
        .allowlist_type("stats_info_response_msg_t")
        .allowlist_var("STAT_COMMAND_GET")
        // ... and writes to jobs in process (issue 26): updates, holds, requeues, cancellations,
        // and one job's record just before acting on it.
        .allowlist_function("slurm_init_job_desc_msg")
        .allowlist_function("slurm_update_job2")
        .allowlist_function("slurm_free_job_array_resp")
        .allowlist_function("slurm_requeue2")
        .allowlist_function("slurm_kill_job2")
        .allowlist_function("slurm_load_job")
        .allowlist_type("job_array_resp_msg_t")
        .allowlist_type("slurm_step_id_t")
        .allowlist_var("ALLOC_SID_USER_HOLD")
        .allowlist_var("JOB_STATE_BASE")
        .allowlist_var("JOB_COMPLETING")
        .allowlist_type("job_states")
        // Team limits through slurmdbd, as sacctmgr sets them (accountd's limits helper).
        .allowlist_function("slurmdb_connection_get")
        .allowlist_function("slurmdb_connection_close")
        .allowlist_function("slurmdb_connection_commit")
        .allowlist_function("slurmdb_associations_modify")
        .allowlist_function("slurmdb_tres_get")
        .allowlist_function("slurmdb_init_assoc_rec")
        .allowlist_function("slurm_list_create")
        .allowlist_function("slurm_list_append")
        .allowlist_function("slurm_list_count")
        .allowlist_function("slurm_list_destroy")
        .allowlist_function("slurm_list_iterator_create")
        .allowlist_function("slurm_list_next")
        .allowlist_function("slurm_list_iterator_destroy")
        .allowlist_type("slurmdb_assoc_cond_t")
        .allowlist_type("slurmdb_assoc_rec_t")
        .allowlist_type("slurmdb_tres_cond_t")
        .allowlist_type("slurmdb_tres_rec_t")
        .constified_enum_module("job_states")
        .constified_enum_module("slurm_err_t")
        .layout_tests(true)
        .derive_default(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate();
    match bindings {
        Ok(b) => b,
        Err(e) => fail(&format!(
            "bindgen could not read the Slurm headers ({e}).\n\
             bindgen needs libclang: `apt-get install clang libclang-dev` (Debian/Ubuntu), \
             or set LIBCLANG_PATH."
        )),
    }
}

/// The release of slurm_version.h, or the end of the build with the reason.
fn release_of(path: &Path) -> Release {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", path.display())));
    let headers = path.parent().and_then(Path::parent).unwrap_or(path);
    release::parse(&text, &headers.display().to_string()).unwrap_or_else(|e| fail(&e))
}

fn write(bindings: &bindgen::Bindings, path: &Path) {
    if let Err(e) = bindings.write_to_file(path) {
        fail(&format!("cannot write {}: {e}", path.display()));
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("\nerror: slurm-sys: {msg}\n");
    std::process::exit(1);
}
