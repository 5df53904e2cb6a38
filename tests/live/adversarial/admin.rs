//! Issue 25's careless administrator and noisy neighbour, beside a01's hostile member:
//!
//! - an administrator who rewrites teamshare.toml every 4-8 s, at random: borrow limits up
//!   and down, quotas moved between two teams, a team removed and restored at the next edit
//!   (valid edits), a partition typo, a TOML syntax error, a negative or non-numeric limit
//!   (invalid edits, which must change nothing); the original file is back at the end;
//! - a local user who, every 20 s, holds 2 x 1,000 idle connections to /metrics for 8 s.
//!
//! What must hold with them: a team runs above its ceiling only while a lowered limit is being
//! brought back ([`GRACE`] after the edit that lowered it: DESIGN §4 rule 1 "at all times", within
//! the governor's stated time); a removed team's running jobs leave within the same time; the
//! governor never misses more than one pass (a01's pass watcher); once the original file is back
//! no job is left held by the governor for a reason that is gone ("jobs stranded by a hold");
//! and the daemon's database holds every run sacct has ("runs lost from the database").

use std::collections::BTreeMap;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use teamshare_live_tests::{Cluster, TestResult};

use super::{teams_from_config, Rng, Team, MINUTE};

/// How long a team may stay above a ceiling an edit lowered (or run in an account an edit
/// removed from the teams): the plugin and the daemon read the file within 2 s, and the
/// governor requeues on its next pass (500 ms); the rest is slack for a loaded 2-core machine.
pub(super) const GRACE: Duration = Duration::from_secs(15);

/// The teams in force over time: each valid configuration the administrator wrote, from when it
/// was written.
pub(super) struct History {
    entries: Mutex<Vec<(Instant, Vec<Team>)>>,
}

impl History {
    pub(super) fn new(teams: Vec<Team>) -> History {
        History {
            entries: Mutex::new(vec![(Instant::now(), teams)]),
        }
    }

    fn push(&self, teams: Vec<Team>) {
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        e.push((Instant::now(), teams));
    }

    /// Every team of a configuration in force at some moment of `[at - GRACE, at]`, with the
    /// largest quota and ceiling it had there: what the sampler allows at `at`.
    pub(super) fn window(&self, at: Instant) -> Vec<Team> {
        let e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let from = at.checked_sub(GRACE).unwrap_or(at);
        // The one in force at `from`, and every later one up to `at`.
        let first = e.iter().rposition(|(since, _)| *since <= from).unwrap_or(0);
        let mut merged: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for (since, teams) in &e[first..] {
            if *since > at {
                break;
            }
            for t in teams {
                let m = merged.entry(t.name.clone()).or_insert((0, 0));
                *m = (m.0.max(t.quota), m.1.max(t.ceiling));
            }
        }
        merged
            .into_iter()
            .map(|(name, (quota, ceiling))| Team {
                name,
                quota,
                ceiling,
            })
            .collect()
    }
}

/// What the administrator and the neighbour did.
#[derive(Default)]
pub(super) struct Admin {
    pub(super) edits: BTreeMap<&'static str, u64>,
    pub(super) valid: u64,
    pub(super) invalid: u64,
    pub(super) floods: u64,
    pub(super) flood_failures: u64,
    /// Invalid edits the plugin (slurmctld's log) and the daemon (its log) said they refused,
    /// keeping the last good configuration: one line each per change of the file.
    pub(super) refused_by_plugin: u64,
    pub(super) refused_by_daemon: u64,
}

const PLUGIN_KEEPS: &str = "keeping the last good configuration";
const DAEMON_KEEPS: &str = "not reloaded, the last good one stays in force";

/// One edit of `text` (the configuration in force): its kind, the new text, and whether the
/// product must take it.
fn edit(rng: &mut Rng, text: &str) -> Option<(&'static str, String, bool)> {
    let roll = rng.below(100);
    let team = *rng.pick(&["agents", "training", "research"]);
    Some(match roll {
        0..=29 => {
            let values: &[u64] = match team {
                "agents" => &[0, 1, 2, 3],
                "training" => &[1, 2, 4],
                _ => &[2, 4, 6],
            };
            let v = rng.pick(values).to_string();
            (
                "borrow_limit",
                set_team_field(text, team, "borrow_limit", &v)?,
                true,
            )
        }
        30..=44 => {
            let teams = teams_from_config(text).ok()?;
            let agents = teams.iter().find(|t| t.name == "agents")?.quota;
            let (a, r) = if agents == 2 { ("3", "1") } else { ("2", "2") };
            let moved = set_team_field(text, "agents", "quota", a)?;
            (
                "quota_moved",
                set_team_field(&moved, "research", "quota", r)?,
                true,
            )
        }
        45..=59 => ("team_removed", remove_team(text, "research")?, true),
        60..=69 => (
            "partition_typo",
            text.replacen("partitions = [\"gpu\"]", "partitions = [\"nosuch\"]", 1),
            false,
        ),
        70..=79 => ("syntax_error", format!("{text}\n[[team]\nname =\n"), false),
        80..=89 => (
            "negative_limit",
            set_team_field(text, team, "borrow_limit", "-1")?,
            false,
        ),
        _ => (
            "quota_not_a_number",
            set_team_field(text, team, "quota", "\"two\"")?,
            false,
        ),
    })
}

/// `text` with `field = value` in team `team`'s table (`None` where it has no such line).
fn set_team_field(text: &str, team: &str, field: &str, value: &str) -> Option<String> {
    let name = format!("name = \"{team}\"");
    let (mut in_team, mut done) = (false, false);
    let mut out = String::with_capacity(text.len() + 8);
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_team = false;
        }
        if t == name {
            in_team = true;
        }
        if in_team && !done && t.split('=').next().map(str::trim) == Some(field) {
            out.push_str(&format!("{field} = {value}\n"));
            done = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    done.then_some(out)
}

/// `text` without team `team`'s `[[team]]` table.
fn remove_team(text: &str, team: &str) -> Option<String> {
    let name = format!("name = \"{team}\"");
    let mut blocks: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.trim().starts_with('[') || blocks.is_empty() {
            blocks.push(String::new());
        }
        if let Some(b) = blocks.last_mut() {
            b.push_str(line);
            b.push('\n');
        }
    }
    let before = blocks.len();
    blocks.retain(|b| !(b.starts_with("[[team]]") && b.lines().any(|l| l.trim() == name)));
    (blocks.len() < before).then(|| blocks.concat())
}

/// Write the configuration as an editor that saves atomically would (a file beside it, renamed).
fn write_config(c: &Cluster, text: &str) -> TestResult {
    let path = c.dir.join("etc/teamshare.toml");
    let tmp = c.dir.join("etc/.teamshare.toml.edit");
    std::fs::write(&tmp, text).map_err(|e| e.to_string())?;
    if let Ok(m) = std::fs::metadata(&path) {
        let _ = std::fs::set_permissions(&tmp, m.permissions());
    }
    std::fs::rename(&tmp, &path).map_err(|e| e.to_string())
}

/// The administrator, until `stop`; then the original file again, in force in the governor's
/// state before it returns.
pub(super) fn administrator(
    c: &Cluster,
    seed: u64,
    history: &History,
    stop: &AtomicBool,
) -> Result<Admin, String> {
    let mut rng = Rng::new(seed ^ 0xAD31_0000);
    let mut admin = Admin::default();
    let original = c.original_config().to_string();
    let digest = c.state()?["config_digest"].clone();
    let mut current = original.clone();
    let mut written = original.clone();
    let mut restore: Option<String> = None;
    let mut last_write = Instant::now();
    let plugin_before = c.slurmctld_log().matches(PLUGIN_KEEPS).count();
    let daemon_before = c.governor_log().matches(DAEMON_KEEPS).count();
    while !stop.load(Ordering::SeqCst) {
        let wait = Duration::from_millis(rng.range(4000, 8000));
        let started = Instant::now();
        while started.elapsed() < wait && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let (kind, text, valid) = match restore.take() {
            Some(before) => ("team_restored", before, true),
            None => match edit(&mut rng, &current) {
                Some(e) => e,
                None => continue,
            },
        };
        // Every edit changes the file (each refusal is said once per change).
        if text == written {
            continue;
        }
        write_config(c, &text)?;
        last_write = Instant::now();
        written.clone_from(&text);
        *admin.edits.entry(kind).or_default() += 1;
        if valid {
            admin.valid += 1;
            if kind == "team_removed" {
                restore = Some(current.clone());
            }
            history.push(teams_from_config(&text)?);
            current = text;
        } else {
            admin.invalid += 1;
        }
    }
    // The last edit is read (within 2 s) before the original replaces it.
    std::thread::sleep(Duration::from_secs(4).saturating_sub(last_write.elapsed()));
    write_config(c, &original)?;
    history.push(teams_from_config(&original)?);
    c.wait_for("the original teamshare.toml in force", MINUTE, || {
        Ok((c.state()?["config_digest"] == digest).then_some(()))
    })?;
    let plugin = c.slurmctld_log().matches(PLUGIN_KEEPS).count();
    let daemon = c.governor_log().matches(DAEMON_KEEPS).count();
    admin.refused_by_plugin = plugin.saturating_sub(plugin_before) as u64;
    admin.refused_by_daemon = daemon.saturating_sub(daemon_before) as u64;
    Ok(admin)
}

/// The neighbour: every 20 s, two of tsuser's processes hold 1,000 idle connections each to
/// /metrics for 8 s, until `stop`.
pub(super) fn neighbour(c: &Cluster, stop: &AtomicBool, admin: &Mutex<Admin>) {
    let Some((host, port)) = c.metrics_addr().rsplit_once(':') else {
        return;
    };
    let script = format!(
        "for i in $(seq 1000); do exec {{fd}}<>/dev/tcp/{host}/{port} || break; done; sleep 8"
    );
    let mut next = Instant::now() + Duration::from_secs(5);
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
        if Instant::now() < next {
            continue;
        }
        next = Instant::now() + Duration::from_secs(20);
        let floods: Vec<Result<Child, String>> = (0..2)
            .map(|_| c.spawn_as_user("bash", &["-c", &script]))
            .collect();
        let mut a = admin.lock().unwrap_or_else(|p| p.into_inner());
        a.floods += 1;
        drop(a);
        for f in floods {
            match f {
                Ok(mut child) => {
                    let _ = child.wait();
                }
                Err(_) => {
                    admin
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .flood_failures += 1
                }
            }
        }
    }
}

/// Pending jobs the governor still holds for a reason that is gone once the original
/// configuration is in force (every GPU job's account is a team again): given two passes to
/// release them, those left are stranded.
pub(super) fn stranded_holds(c: &Cluster) -> Result<Vec<String>, String> {
    let held = || -> Result<Vec<String>, String> {
        let out = c.ok(
            "squeue",
            &[
                "-h",
                "-t",
                "PD",
                "-O",
                "JobID:20|,Account:30|,admin_comment:300",
            ],
        )?;
        Ok(out
            .lines()
            .filter(|l| l.contains("teamshare: held: ") && !l.contains("its run ended by itself"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect())
    };
    let r = c.wait_for("the governor's holds released", MINUTE, || {
        let h = held()?;
        Ok(h.is_empty().then_some(()))
    });
    match r {
        Ok(()) => Ok(Vec::new()),
        Err(_) => held(),
    }
}

/// Runs sacct has (as a one-shot ingest of the window finds them) that the daemon's database
/// lacks, once the daemon had a minute to ingest them.
pub(super) fn runs_lost(c: &Cluster, since: &str, ids: &[u64]) -> Result<Vec<String>, String> {
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    let fresh = c.dir.join("a01-fresh.db");
    let _ = std::fs::remove_file(&fresh);
    let out = c.accountd(&fresh, &["ingest", "--since", since])?;
    if !out.status.success() {
        return Err(format!(
            "one-shot ingest: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let reference = crate::crash::runs_of(&fresh, &ids)?;
    let db = c.dir.join("etc/accountd.db");
    let missing = |have: &crate::crash::Runs| -> Vec<String> {
        reference
            .difference(have)
            .map(|r| format!("{r:?}"))
            .collect()
    };
    let r = c.wait_for("the daemon's database to hold every run", MINUTE, || {
        let have = crate::crash::runs_of(&db, &ids)?;
        Ok(missing(&have).is_empty().then_some(()))
    });
    match r {
        Ok(()) => Ok(Vec::new()),
        Err(_) => Ok(missing(&crate::crash::runs_of(&db, &ids)?)),
    }
}
