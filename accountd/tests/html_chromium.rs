//! `accountd report teams --format html` rendered by a real headless Chromium (Debian's
//! `chromium`, installed by contrib/install-deps.sh): the page as a browser lays it out, its
//! text read back from Chromium's own PDF print (pdftotext), and a screenshot. The page and the
//! screenshot are left in `target/test-artifacts/html-report.{html,png}` for a person to look at.
//!
//! No Chromium is a failure, never a skip: the page is only checked when a browser renders it.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use accountd::gpu_sample::Sample;
use accountd::store::{CapacitySample, Store};

const BIN: &str = env!("CARGO_BIN_EXE_accountd");

const CONFIG: &str = r#"[cluster]
name = "htmlcluster"
partitions = ["gpu"]
currency = "BRL"

[gpu_types.default]
rate_per_hour = 10.0

[[team]]
name = "agents"
quota = 2
borrow_limit = 2

[[team]]
name = "training"
quota = 4

[accountd]
database = "accountd.db"
"#;

/// Three days, capacity 8 (quotas 2 + 4, 2 GPUs unallocated):
/// - 2024-05-01: agents 4 GPUs in [00:00, 06:00): 2 in quota, 2 borrowed (12 + 12 GPU-hours);
/// - 2024-05-02: training 4 GPUs all day: 96 GPU-hours in quota;
/// - 2024-05-03: an account named like markup holds 1 GPU for an hour (borrowed, no quota):
///   the page must show the name as text, not as an element.
///
/// Only agents' job was sampled ([`samples`]).
const SACCT: &str = "\
1|1|htmlcluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T06:00:00|06:00:00|cpu=4,gres/gpu=4,node=1|2024-05-01T00:00:00|2880|1|cpu=4,gres/gpu=4,node=1
2|2|htmlcluster|training|bob|gpu|normal|COMPLETED|2024-05-02T00:00:00|2024-05-02T00:00:00|2024-05-03T00:00:00|1-00:00:00|cpu=8,gres/gpu=4,node=1|2024-05-02T00:00:00|2880|1|cpu=8,gres/gpu=4,node=1
3|3|htmlcluster|<b>x</b>|eve|gpu|normal|COMPLETED|2024-05-03T10:00:00|2024-05-03T10:00:00|2024-05-03T11:00:00|01:00:00|cpu=1,gres/gpu=1,node=1|2024-05-03T10:00:00|2880|1|cpu=1,gres/gpu=1,node=1
";

const CHROMIUM: &str = "/usr/bin/chromium";

/// Job 1's GPUs, a sample each hour standing for that hour: two at 90 %, one at 0 % (idle), the
/// fourth never sampled. agents on 2024-05-01: 24 GPU-hours allocated, 12 busy, 6 idle, 6
/// without samples.
fn samples() -> Vec<Sample> {
    let start = 1_714_521_600; // 2024-05-01T00:00:00Z, job 1's start
    let mut samples = Vec::new();
    for (gpu, util) in [("GPU-1", 90), ("GPU-2", 90), ("GPU-3", 0)] {
        for h in 0..6 {
            samples.push(Sample {
                node: "n1".into(),
                gpu_uuid: gpu.into(),
                ts_ms: (start + h * 3600) * 1000,
                interval_ms: 3_600_000,
                minor: None,
                job_id_raw: Some(1),
                job_start: Some(start),
                util_gpu: util,
                util_mem: 0,
                mem_used: 0,
                mem_total: None,
                processes: None,
            });
        }
    }
    samples
}

fn artifacts() -> PathBuf {
    // CARGO_MANIFEST_DIR is accountd/; the workspace's target/ is beside it.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("test-artifacts");
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a command with a deadline: a browser that hangs fails the test instead of stalling it.
fn run_with_deadline(cmd: &mut Command, deadline: Duration) -> Output {
    use std::io::Read as _;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish in {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

/// Chromium as root on a machine without network: no sandbox, no GPU, nothing in the
/// background, a profile of its own.
fn chromium(profile: &Path, args: &[String]) -> Output {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: contrib/install-deps.sh installs Debian's chromium (apt-get install chromium)"
    );
    let mut cmd = Command::new(CHROMIUM);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args);
    run_with_deadline(&mut cmd, Duration::from_secs(120))
}

/// `html` printed by Chromium to `pdf` (a profile under `dir`), and the PDF's text as
/// pdftotext lays it out.
fn print_pdf(dir: &Path, html: &Path, pdf: &Path) -> String {
    let profile = dir.join("chromium-profile");
    let o = chromium(
        &profile,
        &[
            "--no-pdf-header-footer".to_string(),
            format!("--print-to-pdf={}", pdf.display()),
            format!("file://{}", html.display()),
        ],
    );
    assert!(
        pdf.exists(),
        "chromium printed no PDF: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = Command::new("pdftotext")
        .args(["-layout"])
        .arg(pdf)
        .arg("-")
        .output()
        .expect("pdftotext (poppler-utils, contrib/install-deps.sh)");
    assert!(text.status.success());
    String::from_utf8_lossy(&text.stdout).into_owned()
}

#[test]
fn the_html_report_renders_in_chromium_with_its_table_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("teamshare.toml"), CONFIG).unwrap();
    let mut store = Store::open(&dir.path().join("accountd.db")).unwrap();
    let batch = accountd::sacct::parse(SACCT, &chrono::Utc);
    assert!(batch.malformed.is_empty(), "{:?}", batch.malformed);
    store.record_runs(&batch.runs, 1, None).unwrap();
    let capacity = CapacitySample {
        ts: 1_711_929_600, // 2024-04-01T00:00:00Z
        gpus: 8,
        by_type: Default::default(),
    };
    assert!(store.record_capacity("htmlcluster", &capacity).unwrap());
    store
        .record_samples("htmlcluster", &samples(), 5.0, 1_714_780_800)
        .unwrap();
    drop(store);

    let out = Command::new(BIN)
        .arg("--config")
        .arg(dir.path().join("teamshare.toml"))
        .args([
            "report",
            "teams",
            "--format",
            "html",
            "--since",
            "2024-05-01",
            "--until",
            "2024-05-04",
        ])
        .env("TZ", "UTC")
        .env_remove("SLURM_CONF")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = String::from_utf8(out.stdout).unwrap();
    let art = artifacts();
    let html = art.join("html-report.html");
    fs::write(&html, &page).unwrap();
    // The markup in the account's name is text: escaped in the source.
    assert!(page.contains("&lt;b&gt;x&lt;/b&gt;"), "{page}");
    assert!(!page.contains("<b>x</b>"));

    // The page's text as Chromium lays it out: its print to PDF, read back by pdftotext.
    let profile = dir.path().join("chromium-profile");
    let pdf = dir.path().join("page.pdf");
    let url = format!("file://{}", html.display());
    let text = print_pdf(dir.path(), &html, &pdf);
    fs::write(art.join("html-report.txt"), &text).unwrap();
    for wanted in [
        "GPU usage on htmlcluster",
        "GPU-hours per day",
        "Cost per day (BRL)",
        "Allocated and busy GPU-hours per day",
        "Idle GPU-hours per user",
        "agents",
        "training",
        "<b>x</b>", // the escaped name reads as itself
        "05-01",    // the charts' first and last days
        "05-03",
    ] {
        assert!(
            text.contains(wanted),
            "the rendered page lacks {wanted:?}:\n{text}"
        );
    }
    // The period's figures, as the table prints them (TEAM JOBS QUOTA GPU-HOURS IN-QUOTA
    // BORROWED): agents 24 GPU-hours (12 in quota, 12 borrowed), training 96 in quota.
    let row = |team: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(team))
            .unwrap_or_else(|| panic!("no row for {team} in:\n{text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let agents = row("agents");
    assert!(
        agents.starts_with(&[
            "agents".into(),
            "1".into(),
            "2".into(),
            "24.0000".into(),
            "12.0000".into(),
            "12.0000".into()
        ]),
        "{agents:?}"
    );
    let training = row("training");
    assert!(
        training.starts_with(&[
            "training".into(),
            "1".into(),
            "4".into(),
            "96.0000".into(),
            "96.0000".into(),
            "0.0000".into()
        ]),
        "{training:?}"
    );

    // The DOM Chromium built from it: three charts whose bars carry each day's figures (their
    // tooltips), and no element made of the account's name. 2024-05-01: agents 4 GPUs x 6 h, 2
    // over its quota: 12 borrowed, lent by training (4 idle of quota) and the pool (2
    // unallocated) 2:1, 8 and 4; 2024-05-02: training 4 x 24 h in quota. Busy and idle:
    // [`samples`].
    let o = chromium(&profile, &["--dump-dom".to_string(), url.clone()]);
    let dom = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(dom.matches("<svg class=\"chart\"").count(), 3, "{dom}");
    for tooltip in [
        "agents, 2024-05-01: 12.0000 GPU-hours in quota",
        "agents, 2024-05-01: 12.0000 GPU-hours borrowed",
        "training, 2024-05-01: 8.0000 GPU-hours lent",
        "(pool), 2024-05-01: 4.0000 GPU-hours lent",
        "training, 2024-05-02: 96.0000 GPU-hours in quota",
        "agents, 2024-05-01: 12.0000 GPU-hours busy",
        "agents, 2024-05-01: 6.0000 GPU-hours idle",
        "agents, 2024-05-01: 6.0000 GPU-hours without samples",
        "training, 2024-05-02: 96.0000 GPU-hours without samples",
    ] {
        assert!(
            dom.contains(tooltip),
            "no bar {tooltip:?} in the DOM: {dom}"
        );
    }
    assert!(
        !dom.contains("<b>x</b>"),
        "the account's name became markup"
    );

    // A screenshot, for a person; a blank page would be a few KiB of one colour.
    let png = art.join("html-report.png");
    let _ = fs::remove_file(&png);
    let o = chromium(
        &profile,
        &[
            "--window-size=1280,2600".to_string(),
            format!("--screenshot={}", png.display()),
            url,
        ],
    );
    let bytes = fs::read(&png).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}): {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
    assert!(
        bytes.len() > 20_000,
        "a {} byte screenshot is a blank page",
        bytes.len()
    );
}

/// 500 teams of one GPU of quota each, two one-GPU jobs each, on 500 GPUs; team `t000`'s two
/// jobs take 4 GPUs, which siloed refuses (more than its quota): that team leads the page.
fn replay_of_500_teams(dir: &Path) -> String {
    let mut config = String::from("[cluster]\nname = \"wide\"\npartitions = [\"gpu\"]\n");
    let mut map = String::from("gpus_per_node = 8\n");
    let mut swf = String::from("; UnixStartTime: 1735689600\n; MaxProcs: 500\n");
    for t in 0..500 {
        config += &format!("\n[[team]]\nname = \"t{t:03}\"\nquota = 1\n");
        map += &format!("user {} = t{t:03}\n", t + 1);
        let g = if t == 0 { 4 } else { 1 };
        for k in 0..2 {
            let n = t * 2 + k + 1;
            swf += &format!(
                "{n} {} -1 600 {g} -1 -1 {g} 1200 -1 1 {} 1 -1 1 -1 -1 -1\n",
                k * 700,
                t + 1
            );
        }
    }
    fs::write(dir.join("teamshare.toml"), config).unwrap();
    fs::write(dir.join("map.txt"), map).unwrap();
    fs::write(dir.join("t.swf"), swf).unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(dir.join("teamshare.toml"))
        .args(["replay", "--skip-calibration", "--format", "html", "--swf"])
        .arg(dir.join("t.swf"))
        .arg("--team-map")
        .arg(dir.join("map.txt"))
        .args(["--candidate", "teamshare.toml", "--candidate", "siloed"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_replay_of_500_teams_leads_with_the_cluster_and_what_changes_and_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let page = replay_of_500_teams(dir.path());
    let art = artifacts();
    let html = art.join("replay-500-teams.html");
    fs::write(&html, &page).unwrap();
    // The source: the cluster and 12 teams open, the other 488 folded; one bar label per
    // group shown (13), and the team siloed refuses all of says so under its bars.
    assert!(page.contains("<details><summary>488 more teams, changing least</summary>"));
    let before = &page[..page.find("<details>").unwrap()];
    assert!(
        before.matches("<tr").count() < 13 * 25,
        "{}",
        before.matches("<tr").count()
    );
    assert!(
        page.contains("t000 (all refused: siloed)"),
        "t000 leads: siloed refuses its jobs"
    );

    // As Chromium lays it out: the folded teams are not printed, the page stays short.
    let pdf = dir.path().join("page.pdf");
    let text = print_pdf(dir.path(), &html, &pdf);
    let info = Command::new("pdfinfo").arg(&pdf).output().expect("pdfinfo");
    let info = String::from_utf8_lossy(&info.stdout).into_owned();
    let pages: u32 = info
        .lines()
        .find_map(|l| l.strip_prefix("Pages:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!((1..=20).contains(&pages), "{pages} pages:\n{info}");
    fs::write(art.join("replay-500-teams.txt"), &text).unwrap();
    assert!(text.contains("488 more teams"), "{text}");
    assert!(text.contains("(cluster)"), "{text}");
    let cluster = text.find("(cluster)").unwrap();
    let t000 = text.find("t000").unwrap();
    assert!(cluster < t000, "the cluster's block comes first");
    // The first folded team is not printed (its name may be a bar's label: the text's
    // table rows start with the name).
    let folded = &page[page.find("<details>").unwrap()..];
    let at = folded.find("<td class=\"text\">t").unwrap() + "<td class=\"text\">".len();
    let name = &folded[at..at + 4];
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{name} "))),
        "the folded team {name} was printed:\n{text}"
    );
}
