//! Who can read the accounting database (DESIGN 7): the real binary run as other Linux users.
//!
//! The daemon (root here) makes the database 0640 with its directory's group when that directory
//! is open to a group and closed to others. A member of the group runs reports on it, whether
//! `accountd run` has it open (its `-wal` and `-shm` exist) or not (they do not, and the reader
//! cannot create them); a user outside the group gets one plain line, not SQLite's message.
//!
//! Needs root (to run commands as other users); as root it creates the user `tsuser`
//! (`useradd -M tsuser`) if missing. Without them the test says so and passes.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Output};

use accountd::store::{CapacitySample, Store};

const BIN: &str = env!("CARGO_BIN_EXE_accountd");

const CONFIG: &str = r#"[cluster]
name = "testcluster"
partitions = ["gpu"]

[gpu_types.default]
rate_per_hour = 10.0

[[team]]
name = "agents"
quota = 2

[[team]]
name = "training"
quota = 4

[accountd]
database = "data/accountd.db"
"#;

const SACCT: &str = "\
1|1|testcluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T00:59:00|2024-05-01T01:00:00|2024-05-01T03:00:00|02:00:00|billing=2,cpu=2,gres/gpu=2,node=1|2024-05-01T00:59:00|2880|1|billing=2,cpu=2,gres/gpu=2,node=1
2|2|testcluster|training|bob|gpu|normal|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:00:00|2024-05-01T10:30:00|00:30:00|cpu=8,gres/gpu=4,node=1|2024-05-01T10:00:00|2880|1|cpu=8,gres/gpu=4,node=1
";

/// `id <flag> <user>`, if the user exists.
fn id(flag: &str, user: &str) -> Option<u32> {
    let o = Command::new("id").args([flag, user]).output().ok()?;
    String::from_utf8(o.stdout).ok()?.trim().parse().ok()
}

fn report_as(dir: &Path, uid: u32, gid: u32, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(dir.join("teamshare.toml"))
        .args(args)
        .env("TZ", "UTC")
        .env_remove("SLURM_CONF")
        .current_dir("/")
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_group_member_reads_reports_and_others_get_a_plain_refusal() {
    let root = id("-u", &whoami()) == Some(0);
    if root && id("-u", "tsuser").is_none() {
        // An unprivileged user without a home, as the test needs it.
        let _ = Command::new("useradd").args(["-M", "tsuser"]).status();
    }
    let (Some(0), Some(ts_uid), Some(ts_gid), Some(nobody_uid), Some(nobody_gid)) = (
        id("-u", "root").filter(|_| id("-u", &whoami()) == Some(0)),
        id("-u", "tsuser"),
        id("-g", "tsuser"),
        id("-u", "nobody"),
        id("-g", "nobody"),
    ) else {
        eprintln!("skipped: needs root and the users tsuser (useradd -M tsuser) and nobody");
        return;
    };
    let site = tempfile::tempdir().unwrap();
    let dir = site.path();
    // Others may pass through the site (the binary and the configuration are public)...
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.join("teamshare.toml"), CONFIG).unwrap();
    // ... and the data directory is the administrator's statement: tsuser's group may read it.
    let data = dir.join("data");
    fs::create_dir(&data).unwrap();
    std::os::unix::fs::chown(&data, None, Some(ts_gid)).unwrap();
    fs::set_permissions(&data, fs::Permissions::from_mode(0o750)).unwrap();

    let db = data.join("accountd.db");
    {
        let mut store = Store::open(&db).unwrap();
        let batch = accountd::sacct::parse(SACCT, &chrono::Utc);
        store.record_runs(&batch.runs, 1, None).unwrap();
        let sample = CapacitySample {
            ts: 1_711_929_600,
            gpus: 8,
            by_type: Default::default(),
        };
        store.record_capacity("testcluster", &sample).unwrap();
    }
    let m = fs::metadata(&db).unwrap();
    assert_eq!(m.mode() & 0o777, 0o640);
    assert_eq!(m.gid(), ts_gid);
    // Closed: no -wal, and tsuser cannot create one.
    assert!(!data.join("accountd.db-wal").exists());

    let period = ["--since", "2024-05-01", "--until", "2024-05-02"];
    let report =
        |uid, gid, kind: &str| report_as(dir, uid, gid, &[&["report", kind][..], &period].concat());
    let o = report(ts_uid, ts_gid, "teams");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("agents"), "{}", text(&o.stdout));
    assert!(text(&o.stderr).is_empty(), "{}", text(&o.stderr));
    assert!(!data.join("accountd.db-wal").exists());
    let o = report(ts_uid, ts_gid, "fairshare");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));

    // Open by the daemon, with a write in its -wal: read through the -shm, the write seen.
    let mut writer = Store::open(&db).unwrap();
    let later = SACCT.replace("1|1|testcluster", "3|3|testcluster");
    let batch = accountd::sacct::parse(&later, &chrono::Utc);
    writer.record_runs(&batch.runs, 2, None).unwrap();
    for suffix in ["-wal", "-shm"] {
        let m = fs::metadata(data.join(format!("accountd.db{suffix}"))).unwrap();
        assert_eq!((m.mode() & 0o777, m.gid()), (0o640, ts_gid), "{suffix}");
    }
    let o = report_as(
        dir,
        ts_uid,
        ts_gid,
        &[&["report", "teams", "--format", "csv"][..], &period].concat(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let agents = text(&o.stdout)
        .lines()
        .find(|l| l.starts_with("agents,"))
        .unwrap()
        .to_string();
    // Jobs 1 and 3: two runs.
    assert!(agents.starts_with("agents,2,"), "{agents}");

    // Outside the group: one line that says what to do.
    let o = report(nobody_uid, nobody_gid, "teams");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("permission denied"), "{err}");
    assert!(
        err.contains("readable only by user root and group tsuser"),
        "{err}"
    );
    assert!(!err.to_lowercase().contains("sqlite"), "{err}");
    assert!(!err.contains("unable to open"), "{err}");
    drop(writer);
}

fn whoami() -> String {
    Command::new("id")
        .arg("-un")
        .output()
        .map(|o| text(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
