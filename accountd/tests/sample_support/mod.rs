//! What the `sample_*` tests share: the fake NVML library (built here, from contrib/fake-nvml),
//! a fake node (device files, `scontrol` and `slurmd` on PATH printing recorded texts) and a
//! head configuration.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub const BIN: &str = env!("CARGO_BIN_EXE_accountd");

/// The fake `libnvidia-ml.so`, built for this profile with `cargo build -p fake-nvml` (the test
/// fails, never skips, when it cannot be built).
pub fn fake_nvml() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        // target/<profile>/accountd: the library lands beside it.
        let profile_dir = Path::new(BIN).parent().expect("the binary's directory");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--quiet", "-p", "fake-nvml"]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let out = cmd
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run cargo to build contrib/fake-nvml");
        assert!(
            out.status.success(),
            "`cargo build -p fake-nvml` failed; the sample tests need the fake NVML library:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lib = profile_dir.join("libnvidia_ml.so");
        assert!(
            lib.exists(),
            "{} is missing after `cargo build -p fake-nvml`",
            lib.display()
        );
        lib
    })
}

/// Four GPUs listed with minors 3, 2, 1, 0: NVML index i is minor 3 - i, never i. Minor 3 runs at
/// 90 %, 2 at 2 % (idle), 1 at 50 %, 0 at 0 % (idle).
pub const SCRIPT: &str = r#"
gpu 3 uuid=GPU-3333 name="Fake H100"
gpu 2 uuid=GPU-2222
gpu 1 uuid=GPU-1111
gpu 0 uuid=GPU-0000
util 3 +0 90 1000 30
util 2 +0 2
util 1 +0 50
util 0 +0 0
"#;

/// Job 42 as scontrol prints it under TZ=UTC: GRES IDX 0-1 on n1.
pub const JOB_START: i64 = 1_796_008_118; // 2026-11-30T03:08:38Z
pub const SHOW_JOB: &str = "JobId=42 JobName=train model
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   Priority=1000 Nice=0 Account=agents QOS=normal
   JobState=RUNNING Reason=None Dependency=(null)
   StartTime=2026-11-30T03:08:38 EndTime=Unknown Deadline=N/A
   NodeList=n1
   BatchHost=n1
   TRES=cpu=2,node=1,billing=2,gres/gpu=2
   JOB_GRES=gpu:2
     Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=gpu:2(IDX:0-1)
   TresPerNode=gres:gpu:2

JobId=43 JobName=elsewhere
   JobState=RUNNING Reason=None Dependency=(null)
   StartTime=2026-11-30T03:08:40 EndTime=Unknown Deadline=N/A
   JOB_GRES=gpu:4
     Nodes=n2 CPU_IDs=0 Mem=0 GRES=gpu:4(IDX:0-3)
";

/// A temporary GPU node and head.
pub struct Site {
    pub dir: tempfile::TempDir,
}

impl Site {
    pub fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        let site = Site { dir };
        fs::write(site.path("script"), SCRIPT).unwrap();
        fs::create_dir_all(site.path("bin")).unwrap();
        fs::create_dir_all(site.path("dev")).unwrap();
        for m in 0..4 {
            // Stand-ins for /dev/nvidia<m>: their names say the minor, as on the dev cluster.
            fs::write(site.path(&format!("dev/nvidia{m}")), "").unwrap();
        }
        fs::write(site.path("slurm.conf"), "ClusterName=testcluster\n").unwrap();
        fs::write(
            site.path("teamshare.toml"),
            "[cluster]\nname = \"testcluster\"\npartitions = [\"gpu\"]\n\n[[team]]\nname = \"agents\"\nquota = 2\n\n[accountd]\ndatabase = \"accountd.db\"\nsample_spool = \"spool\"\n",
        )
        .unwrap();
        // gres.conf order: nvidia3 first, then nvidia[0-2]: IDX 0 -> minor 3, IDX 1 -> minor 0.
        let dev = site.path("dev");
        site.fake(
            "slurmd",
            &format!(
                "slurmd: Gres Name=gpu Type=(null) Count=1 Index=3 ID=7696487 File={d}/nvidia3 (null)\nslurmd: Gres Name=gpu Type=(null) Count=3 Index=0 ID=7696487 File={d}/nvidia[0-2] (null)\n",
                d = dev.display()
            ),
            true,
        );
        site.fake("scontrol", SHOW_JOB, false);
        site
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A stand-in for a Slurm command printing `text` (on stderr, as slurmd logs, or stdout).
    pub fn fake(&self, program: &str, text: &str, stderr: bool) {
        let out = self.path(&format!("{program}.out"));
        fs::write(&out, text).unwrap();
        let script = self.path(&format!("bin/{program}"));
        let redirect = if stderr { " >&2" } else { "" };
        fs::write(
            &script,
            format!("#!/bin/sh\ncat '{}'{redirect}\n", out.display()),
        )
        .unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// `accountd` with this site's environment: fake Slurm first on PATH, the fake NVML script.
    pub fn accountd(&self) -> Command {
        let mut cmd = Command::new(BIN);
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.current_dir(self.dir.path())
            .env("PATH", path)
            .env("SLURM_CONF", self.path("slurm.conf"))
            .env("FAKE_NVML_SCRIPT", self.path("script"))
            .env_remove("FAKE_NVML_DEVICES")
            .env_remove("SLURMD_NODENAME")
            .arg("--config")
            .arg(self.path("teamshare.toml"));
        cmd
    }

    /// `accountd sample` on node n1 with the fake NVML, plus `extra`.
    pub fn sampler(&self, extra: &[&str]) -> Command {
        let mut cmd = self.accountd();
        cmd.arg("sample")
            .args(["--node", "n1", "--nvml-lib"])
            .arg(fake_nvml())
            .args(extra);
        cmd
    }

    /// The complete batch files of node n1's spool.
    pub fn ready_files(&self) -> Vec<PathBuf> {
        let dir = self.path("spool/n1/ready");
        let mut v: Vec<PathBuf> = match fs::read_dir(&dir) {
            Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
            Err(_) => Vec::new(),
        };
        v.sort();
        v
    }
}

/// Every sample line of `files`, parsed.
pub fn samples_in(files: &[PathBuf]) -> Vec<serde_json::Value> {
    files
        .iter()
        .flat_map(|f| {
            fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<serde_json::Value>>()
        })
        .collect()
}
