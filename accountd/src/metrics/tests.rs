use super::*;
use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn config() -> Config {
    teamshare_config::parse(
        r#"
[cluster]
name = "c"
partitions = ["gpu"]
currency = "BRL"

[gpu_types.default]
rate_per_hour = 10.0

[[team]]
name = "agents"
quota = 2
weight = 1

[[team]]
name = "training"
quota = 4
weight = 1
"#,
        "teamshare.toml",
    )
    .unwrap()
}

#[test]
fn labels_and_help_are_escaped() {
    // A team name is the administrator's text: quote, backslash and line feed escaped.
    let mut c = config();
    c.teams[0].name = "a\"b\\c\nd".to_string();
    let text = render(&c, &Live::default(), None);
    assert!(
        text.contains("teamshare_quota_gpus{team=\"a\\\"b\\\\c\\nd\"} 2\n"),
        "{text}"
    );
    // Values as Prometheus reads them (Go's ParseFloat).
    let live = |capacity| Live {
        governor_last_pass_seconds: Some(capacity),
        ..Live::default()
    };
    let value = |v: f64| {
        let text = render(&config(), &live(v), None);
        let line = text
            .lines()
            .find(|l| l.starts_with("teamshare_governor_last_pass_seconds "))
            .map(|l| l.rsplit(' ').next().unwrap_or("").to_string());
        line.unwrap_or_else(|| panic!("{text}"))
    };
    assert_eq!(value(0.5), "0.5");
    assert_eq!(value(3.0), "3");
    assert_eq!(value(f64::NAN), "NaN");
    // The crate writes "-inf"; Prometheus reads infinities without regard to case.
    assert!(value(f64::NEG_INFINITY).eq_ignore_ascii_case("-Inf"));
    assert_eq!(value(1e-7).parse::<f64>().unwrap(), 1e-7);
}

#[test]
fn live_values_without_the_database() {
    let live = Live {
        capacity: Some(8),
        governor_last_pass: Some(1_700_000_000),
        ingest_last_success: None,
        teams: BTreeMap::from([(
            "agents".to_string(),
            LiveTeam {
                gpu_limit: 4,
                running_gpus: 3,
                ..LiveTeam::default()
            },
        )]),
        displaced: BTreeMap::from([("agents\"x".to_string(), 2)]),
        reclaimed: BTreeMap::from([("training".to_string(), 3)]),
        over_ceiling: BTreeMap::from([("research".to_string(), 1)]),
        limits: LiveLimits {
            in_force: BTreeMap::from([("agents".to_string(), 6)]),
            failures: BTreeMap::from([("agents".to_string(), 3)]),
            updates: BTreeMap::from([("agents".to_string(), 5)]),
        },
        governor_passes: 4,
        governor_pass_seconds: 0.5,
        governor_slurm_calls: 9,
        governor_last_pass_seconds: Some(0.125),
        governor_last_pass_slurm_calls: Some(2),
        governor_quiet_passes: 7,
        governor_acts: 3,
        governor_act_seconds: 1.5,
        governor_act_slurm_calls: 11,
        governor_act_processes: 2,
        governor_last_act_seconds: Some(0.75),
        governor_last_act_slurm_calls: Some(5),
    };
    let text = render(&config(), &live, None);
    for line in [
        "teamshare_governor_passes_total 4\n",
        "teamshare_governor_quiet_passes_total 7\n",
        "teamshare_governor_pass_seconds_total 0.5\n",
        "teamshare_governor_slurm_calls_total 9\n",
        "teamshare_governor_last_pass_seconds 0.125\n",
        "teamshare_governor_last_pass_slurm_calls 2\n",
        "teamshare_governor_acts_total 3\n",
        "teamshare_governor_act_seconds_total 1.5\n",
        "teamshare_governor_act_slurm_calls_total 11\n",
        "teamshare_governor_act_processes_total 2\n",
        "teamshare_governor_last_act_seconds 0.75\n",
        "teamshare_governor_last_act_slurm_calls 5\n",
    ] {
        assert!(text.contains(line), "{line} missing from {text}");
    }
    assert!(
        text.contains("teamshare_quota_gpus{team=\"training\"} 4\n"),
        "{text}"
    );
    assert!(
        text.contains("teamshare_gpu_limit{team=\"agents\"} 4\n"),
        "{text}"
    );
    // Issue 25, finding 17: what Slurm enforces beside what the plan wants, and the moves
    // that failed (slurmdbd down: the plan wants 4, Slurm still holds 6).
    assert!(
        text.contains("teamshare_gpu_limit_in_force{team=\"agents\"} 6\n"),
        "{text}"
    );
    assert!(
        text.contains("teamshare_governor_limit_failures_total{team=\"agents\"} 3\n"),
        "{text}"
    );
    assert!(text.contains("teamshare_governor_limit_updates_total{team=\"agents\"} 5\n"));
    assert!(text.contains("teamshare_gpus_in_use{kind=\"in_quota\",team=\"agents\"} 2\n"));
    assert!(text.contains("teamshare_gpus_in_use{kind=\"borrowed\",team=\"agents\"} 1\n"));
    assert!(text.contains(
        "teamshare_governor_requeues_total{reason=\"priority_class\",team=\"agents\\\"x\"} 2\n"
    ));
    assert!(text.contains("# TYPE teamshare_governor_requeues_total counter\n"));
    assert!(text
        .contains("teamshare_governor_requeues_total{reason=\"ceiling\",team=\"research\"} 1\n"));
    assert!(
        text.contains(
            "teamshare_governor_requeues_total{reason=\"reclaim\",team=\"training\"} 3\n"
        ),
        "{text}"
    );
    assert!(text.contains("teamshare_capacity_gpus 8\n"));
    assert!(text.contains("teamshare_governor_last_pass_timestamp_seconds 1700000000\n"));
    // No samples, no family: neither the ingest timestamp nor the database's figures.
    assert!(!text.contains("teamshare_ingest_last_success"), "{text}");
    assert!(!text.contains("teamshare_month_"), "{text}");
}

#[test]
fn the_unreadable_jobs_counter_is_always_exposed() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("accountd.db");
    std::fs::write(
        &database,
        "not a database, and long enough to have a header",
    )
    .unwrap();
    let exporter = Exporter::new(config(), database);
    let (text, error) = exporter.scrape();
    assert!(error.is_some());
    assert!(
        text.contains("# TYPE teamshare_governor_unreadable_jobs_total counter\nteamshare_governor_unreadable_jobs_total 0\n"),
        "{text}"
    );
    exporter.update_counters(|c| c.governor_unreadable_jobs += 3);
    assert!(exporter
        .scrape()
        .0
        .contains("teamshare_governor_unreadable_jobs_total 3\n"));
    // A reloaded configuration shows at the next scrape.
    let mut fewer = config();
    fewer.teams.truncate(1);
    exporter.set_config(fewer);
    let (text, _) = exporter.scrape();
    assert!(
        text.contains("teamshare_quota_gpus{team=\"agents\"}"),
        "{text}"
    );
    assert!(!text.contains("team=\"training\""), "{text}");
}

fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn the_server_answers_metrics_and_nothing_else() {
    let body: Body = Arc::new(|| "teamshare_capacity_gpus 8\n".to_string());
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), body).unwrap();
    let addr = server.local_addr();
    let ok = exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nConnection: close\r\nHost: x\r\n\r\n",
    );
    assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
    // Header names are case-insensitive (hyper writes them in lower case).
    let lower = ok.to_ascii_lowercase();
    assert!(
        lower.contains("content-type: text/plain; version=0.0.4"),
        "{ok}"
    );
    assert!(lower.contains("content-length: 26\r\n"), "{ok}");
    assert!(ok.ends_with("\r\n\r\nteamshare_capacity_gpus 8\n"), "{ok}");
    let head = exchange(addr, b"HEAD /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(
        head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"),
        "{head}"
    );
    let missing = exchange(addr, b"GET /other HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(missing.starts_with("HTTP/1.1 404 "), "{missing}");
    let post = exchange(addr, b"POST /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(
        post.starts_with("HTTP/1.1 405 ") && post.to_ascii_lowercase().contains("allow: get"),
        "{post}"
    );
    let garbage = exchange(addr, b"\x00\x01 nonsense\r\n\r\n");
    assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");
    // A head that never ends is cut at the limit.
    let mut huge = b"GET /metrics HTTP/1.1\r\nConnection: close\r\nX: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', MAX_REQUEST_BYTES * 2));
    let big = exchange(addr, &huge);
    assert!(big.starts_with("HTTP/1.1 431 "), "{big}");
    // A client that connects and says nothing does not stop the server for long.
    let idle = TcpStream::connect(addr).unwrap();
    let again = exchange(addr, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(again.starts_with("HTTP/1.1 200 OK"), "{again}");
    drop(idle);
    server.stop();
    assert!(TcpStream::connect(addr).is_err());
}

/// Issue 25, finding 3: 2 x 1,100 idle keep-alive connections of a local user filled the
/// daemon's 1,024 descriptors, and libslurm, sacct and the state write failed. At most
/// [`MAX_CONNECTIONS`] are served at once; the rest are closed as soon as accepted; an
/// idle one is closed after the header read timeout, and none is kept alive.
#[test]
fn issue25_3_idle_connections_cannot_take_the_daemons_descriptors() {
    use std::io::Read as _;
    let body: Body = Arc::new(|| "ok\n".to_string());
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), body).unwrap();
    let addr = server.local_addr();
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    assert!(server.open_connections() <= MAX_CONNECTIONS);
    // The ones beyond the limit were closed: reading them ends at once.
    let mut closed = 0;
    for mut s in idle.iter().map(|s| s.try_clone().unwrap()) {
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        if matches!(s.read(&mut [0u8; 1]), Ok(0)) {
            closed += 1;
        }
    }
    assert!(closed >= 300 - MAX_CONNECTIONS, "only {closed} closed");
    // Past the header read timeout the idle ones are gone too, and a scrape is answered,
    // with its connection closed after it.
    std::thread::sleep(HEADER_READ_TIMEOUT + Duration::from_secs(1));
    assert_eq!(server.open_connections(), 0);
    let ok = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
    assert!(
        ok.to_ascii_lowercase().contains("connection: close"),
        "{ok}"
    );
    drop(idle);
}

#[test]
fn a_panicking_body_does_not_stop_the_server() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let body: Body = Arc::new(move || {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("first scrape fails");
        }
        "ok\n".to_string()
    });
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), body).unwrap();
    let _ = exchange(
        server.local_addr(),
        b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    let second = exchange(
        server.local_addr(),
        b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert!(second.ends_with("\r\n\r\nok\n"), "{second}");
}

/// Issue 30: a team counting the A100 family (1 A100's worth) runs 10 slices of 1/7: 10/7
/// GPU-equivalents, 1 in quota and 3/7 borrowed; its 10 GPUs are 7 in quota and 3 borrowed.
#[test]
fn gpu_equivalents_in_use_where_some_type_is_a_slice() {
    let config = teamshare_config::parse(
        "[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n\n\
         [gpu_types.a100]\nrate_per_hour = 2.8\n\n\
         [gpu_types.\"1g.10gb\"]\nslices_of = \"a100\"\ngpus = \"1/7\"\n\n\
         [[team]]\nname = \"inference\"\nquota = { a100 = 1 }\nborrow_limit = { a100 = 1 }\n",
        "t.toml",
    )
    .unwrap();
    let live = Live {
        teams: BTreeMap::from([(
            "inference".to_string(),
            LiveTeam {
                gpu_limit: 14,
                running_gpus: 10,
                running_by_type: BTreeMap::from([("1g.10gb".to_string(), 10)]),
            },
        )]),
        ..Live::default()
    };
    let text = render(&config, &live, None);
    let sample = |kind: &str| {
        let prefix =
            format!("teamshare_gpu_equivalents_in_use{{kind=\"{kind}\",team=\"inference\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {kind} in {text}"))
    };
    assert!((sample("in_quota") - 1.0).abs() < 1e-9, "{text}");
    assert!((sample("borrowed") - 3.0 / 7.0).abs() < 1e-9, "{text}");
    assert!(
        text.contains("teamshare_gpus_in_use{kind=\"in_quota\",team=\"inference\"} 7\n"),
        "{text}"
    );
    assert!(
        text.contains("teamshare_gpus_in_use{kind=\"borrowed\",team=\"inference\"} 3\n"),
        "{text}"
    );
}
