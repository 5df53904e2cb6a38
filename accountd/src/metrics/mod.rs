//! Metrics in Prometheus' text exposition format (version 0.0.4), every name `teamshare_*`
//! (DESIGN 6), served on `GET /metrics`. The `prometheus` crate writes the exposition and
//! hyper serves it; this module decides what the figures are.
//!
//! Two sources:
//! - what the daemon knows now ([`Live`]): the governor's last pass (limits, GPUs in use), the
//!   capacity, when the last pass and the last ingest succeeded, the jobs it displaced;
//! - what the database says of the current month ([`MonthFigures`]): the same report as
//!   `accountd report teams` for the month so far, the fair-share factors, utilisation from the
//!   NVML samples, preemptions and admission waits from the job runs. Computed at most every
//!   [`MONTH_REFRESH`], so that a scrape is cheap whatever the size of the database.
//!
//! These are administrator metrics: every team's usage and cost in one page. The server binds
//! `[accountd] metrics_listen`, loopback by default (DESIGN 7: a team sees another team's jobs or
//! costs only where the administrator allows it).

mod counters;
mod idle;
mod server;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus::{CounterVec, GaugeVec, Opts, Registry, TextEncoder};

pub use counters::{render_counters, Counters};
pub use idle::{render_idle, IdleFigures};
#[cfg(test)]
use server::HEADER_READ_TIMEOUT;
pub use server::{Body, MetricsServer, MAX_CONNECTIONS, MAX_REQUEST_BYTES};
use teamshare_config::Config;

use crate::model::cost::IDLE;
use crate::model::usage::POOL;
use crate::period::{self, Period, UnixSeconds};
use crate::report::utilisation::{self, UtilisationParams};
use crate::report::{self, FairshareParams, FairshareReport, RowKind, UsageParams, UsageReport};
use crate::slurm_cli::slurm_name;
use crate::store::{Store, StoreError};

/// The media type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// How often the database figures are computed again, at most.
pub const MONTH_REFRESH: Duration = Duration::from_secs(10);

/// Why the governor requeued a job (`teamshare_governor_requeues_total{reason}`).
pub const REASON_RECLAIM: &str = "reclaim";
pub const REASON_PRIORITY_CLASS: &str = "priority_class";
pub const REASON_CEILING: &str = "ceiling";

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot read the GPU samples for utilisation: {0}")]
    Utilisation(#[from] utilisation::UtilisationError),
}

/// One team as the governor's last pass left it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveTeam {
    pub gpu_limit: u32,
    pub running_gpus: u32,
    /// Its running GPUs per type, in a typed configuration (the pass's pools).
    pub running_by_type: BTreeMap<String, u32>,
}

/// What the governor's actions left in Slurm, per team.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveLimits {
    /// The GPU limit each team's account holds as far as the actions know (the last one set
    /// without error): what Slurm enforces, where `teamshare_gpu_limit` is what the plan wants.
    pub in_force: BTreeMap<String, u32>,
    /// Limit moves Slurm refused or did not answer, per team, since the daemon started.
    pub failures: BTreeMap<String, u64>,
    /// Limit moves made, per team, since the daemon started.
    pub updates: BTreeMap<String, u64>,
}

/// What the daemon knows now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Live {
    /// The governed capacity last measured.
    pub capacity: Option<u32>,
    pub governor_last_pass: Option<UnixSeconds>,
    /// Passes so far, and the last one's duration and Slurm client commands.
    pub governor_passes: u64,
    pub governor_last_pass_seconds: Option<f64>,
    pub governor_last_pass_slurm_calls: Option<u64>,
    /// Quiet passes: nothing they plan from had moved, so they read no jobs (not in the above).
    pub governor_quiet_passes: u64,
    /// Slurm client commands all passes ran, and the seconds they took together.
    pub governor_slurm_calls: u64,
    pub governor_pass_seconds: f64,
    /// The actions on plans (limits, requeues, priorities, parking, holds), which run beside
    /// the passes: how many ended, their seconds and Slurm client commands, and the last one's.
    pub governor_acts: u64,
    pub governor_act_seconds: f64,
    pub governor_act_slurm_calls: u64,
    /// Processes started among those calls (client commands, the limits helper's starts).
    pub governor_act_processes: u64,
    pub governor_last_act_seconds: Option<f64>,
    pub governor_last_act_slurm_calls: Option<u64>,
    pub ingest_last_success: Option<UnixSeconds>,
    /// Per team, from the governor's last pass (its published state).
    pub teams: BTreeMap<String, LiveTeam>,
    /// Jobs the governor displaced for a higher class of their team, per team, since the daemon
    /// started.
    pub displaced: BTreeMap<String, u64>,
    /// Jobs the governor requeued itself to reclaim quota (Slurm had not preempted for an
    /// in-quota job within the fallback delay), per team, since the daemon started. sacct
    /// shows them REQUEUED, not PREEMPTED, so they are not in the month's `preempted`.
    pub reclaimed: BTreeMap<String, u64>,
    /// Jobs the governor requeued because their team ran beyond its ceiling (quota + borrow
    /// limit), per team, since the daemon started.
    pub over_ceiling: BTreeMap<String, u64>,
    pub limits: LiveLimits,
}

/// The database's figures for the month so far.
#[derive(Debug, Clone, PartialEq)]
pub struct MonthFigures {
    pub period: Period,
    pub teams: UsageReport,
    pub fairshare: FairshareReport,
    /// Mean GPU utilisation per team, 0..1, where there are samples.
    pub utilisation: BTreeMap<String, f64>,
    /// Runs Slurm preempted (state PREEMPTED) per team.
    pub preempted: BTreeMap<String, u64>,
    /// Mean start - submit of the runs that started, per team, in seconds.
    pub admission_wait: BTreeMap<String, f64>,
}

/// The figures of the month containing `now` (local midnight on the 1st in `tz`) up to `now`.
pub fn month_figures<Tz: chrono::TimeZone>(
    store: &Store,
    config: &Config,
    now: UnixSeconds,
    tz: &Tz,
) -> Result<MonthFigures, MetricsError> {
    let period = Period {
        since: period::month_start(now, tz),
        until: now,
    };
    let cluster = slurm_name(&config.cluster.name);
    let teams = report::usage_report(
        store,
        &UsageParams::from_config(config, period, now, Vec::new()),
    )?;
    let fairshare = report::fairshare_report(
        store,
        &FairshareParams::from_config(config, now, None, Vec::new()),
    )?;
    let util = utilisation::utilisation_report(
        store,
        &UtilisationParams {
            cluster: cluster.clone(),
            period,
            idle_threshold: config.accountd.idle_threshold_percent,
            now,
        },
    )?;
    let utilisation = util
        .teams
        .iter()
        .filter_map(|t| t.time.mean_util().map(|u| (t.team.clone(), u / 100.0)))
        .collect();
    let preempted = store.preempted_runs(&cluster, period.since, period.until)?;
    let mut waits: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    for run in store.runs_started(&cluster, period.since, period.until)? {
        let w = waits.entry(run.account).or_default();
        w.0 += (run.start - run.submit).max(0) as f64;
        w.1 += 1;
    }
    let admission_wait = waits
        .into_iter()
        .map(|(team, (sum, n))| (team, sum / n as f64))
        .collect();
    Ok(MonthFigures {
        period,
        teams,
        fairshare,
        utilisation,
        preempted,
        admission_wait,
    })
}

// ---------------------------------------------------------------------------------------------
// The exposition (the `prometheus` crate's families and text encoder)

#[derive(Clone, Copy)]
enum Kind {
    Gauge,
    Counter,
}

/// One metric family of a scrape.
enum Family {
    Gauge(GaugeVec),
    Counter(CounterVec),
}

impl Family {
    /// One series. A counter's value is what the daemon counted so far (never negative); a
    /// non-finite value is left out of a counter.
    fn sample(&self, labels: &[&str], value: f64) {
        match self {
            Family::Gauge(g) => g.with_label_values(labels).set(value),
            Family::Counter(c) => {
                if value.is_finite() && value > 0.0 {
                    c.with_label_values(labels).inc_by(value);
                } else {
                    // Present at 0: a counter at 0 says "none yet".
                    c.with_label_values(labels);
                }
            }
        }
    }
}

/// The families of one scrape, built from values the daemon already holds: a registry per
/// scrape (a few dozen series) keeps the values where they are computed. A family without
/// series is left out by the registry.
struct Exposition {
    registry: Registry,
}

impl Exposition {
    fn new() -> Exposition {
        Exposition {
            registry: Registry::new(),
        }
    }

    fn family(
        &self,
        name: &str,
        kind: Kind,
        help: &str,
        labels: &[&str],
    ) -> Result<Family, prometheus::Error> {
        let opts = Opts::new(name, help);
        let family = match kind {
            Kind::Gauge => {
                let g = GaugeVec::new(opts, labels)?;
                self.registry.register(Box::new(g.clone()))?;
                Family::Gauge(g)
            }
            Kind::Counter => {
                let c = CounterVec::new(opts, labels)?;
                self.registry.register(Box::new(c.clone()))?;
                Family::Counter(c)
            }
        };
        Ok(family)
    }

    /// The text exposition (format 0.0.4): families sorted by name, series by label values.
    fn text(&self) -> Result<String, prometheus::Error> {
        TextEncoder::new().encode_to_string(&self.registry.gather())
    }
}

/// The names are the crate's own and fixed, so encoding cannot fail in practice; if it ever
/// did, the scrape says why in a comment rather than serving half a page.
fn finish(built: Result<String, prometheus::Error>) -> String {
    built.unwrap_or_else(|e| format!("# teamshare: cannot encode the metrics: {e}\n"))
}

/// The exposition of `live` and, when the database could be read, `month`.
pub fn render(config: &Config, live: &Live, month: Option<&MonthFigures>) -> String {
    finish(try_render(config, live, month))
}

fn try_render(
    config: &Config,
    live: &Live,
    month: Option<&MonthFigures>,
) -> Result<String, prometheus::Error> {
    let e = Exposition::new();
    team_families(&e, config, live)?;
    if let Some(m) = month {
        month_families(&e, m)?;
        month_job_families(&e, m)?;
    }
    governor_families(&e, live)?;
    governor_pass_families(&e, live)?;
    governor_act_families(&e, live)?;
    let f = e.family(
        "teamshare_ingest_last_success_timestamp_seconds",
        Kind::Gauge,
        "When the last successful sacct ingest ended (unix seconds).",
        &[],
    )?;
    if let Some(t) = live.ingest_last_success {
        f.sample(&[], t as f64);
    }
    e.text()
}

/// The teams now: quotas, limits, GPUs in use.
fn team_families(e: &Exposition, config: &Config, live: &Live) -> Result<(), prometheus::Error> {
    let quota = |team: &str| config.team(team).map(|t| t.quota.total);

    let f = e.family(
        "teamshare_quota_gpus",
        Kind::Gauge,
        "Guaranteed GPUs of the team (teamshare.toml).",
        &["team"],
    )?;
    for t in &config.teams {
        f.sample(&[&t.name], f64::from(t.quota.total));
    }

    let f = e.family(
        "teamshare_gpu_limit",
        Kind::Gauge,
        "GPUs the team may hold now (GrpTRES gres/gpu set by the governor's last pass).",
        &["team"],
    )?;
    for (team, t) in &live.teams {
        f.sample(&[team], f64::from(t.gpu_limit));
    }

    let f = e.family(
        "teamshare_gpu_limit_in_force",
        Kind::Gauge,
        "GPUs the team may hold as Slurm enforces it: the GrpTRES gres/gpu the governor last set without error (differs from teamshare_gpu_limit while slurmdbd refuses or does not answer).",
        &["team"],
    )?;
    for (team, n) in &live.limits.in_force {
        f.sample(&[team], f64::from(*n));
    }

    let f = e.family(
        "teamshare_governor_limit_failures_total",
        Kind::Counter,
        "Team GPU limit moves that failed since accountd started; each is tried again next pass.",
        &["team"],
    )?;
    for (team, n) in &live.limits.failures {
        f.sample(&[team], *n as f64);
    }
    let f = e.family(
        "teamshare_governor_limit_updates_total",
        Kind::Counter,
        "Team GPU limit moves made since accountd started.",
        &["team"],
    )?;
    for (team, n) in &live.limits.updates {
        f.sample(&[team], *n as f64);
    }

    let f = e.family(
        "teamshare_gpus_in_use",
        Kind::Gauge,
        "GPUs held by the team's running jobs at the governor's last pass, in quota and borrowed.",
        &["team", "kind"],
    )?;
    for (team, t) in &live.teams {
        let in_quota = match config.team(team).filter(|c| counts_any_family(config, c)) {
            // GPUs of types counted at different sizes: in quota in the proportion of the
            // team's GPU-equivalents that are.
            Some(c) => {
                let (eq, in_eq) = equivalents(config, c, t);
                if eq > 0.0 {
                    (f64::from(t.running_gpus) * in_eq / eq + 1e-9).floor() as u32
                } else {
                    0
                }
            }
            None => t.running_gpus.min(quota(team).unwrap_or(0)),
        };
        f.sample(&[team, "in_quota"], f64::from(in_quota));
        f.sample(&[team, "borrowed"], f64::from(t.running_gpus - in_quota));
    }
    equivalents_family(e, config, live)
}

/// `teamshare_gpu_equivalents_in_use` (issue 30): the GPUs in use where each slice counts at
/// its size; the same as `teamshare_gpus_in_use` where no type is a slice.
fn equivalents_family(
    e: &Exposition,
    config: &Config,
    live: &Live,
) -> Result<(), prometheus::Error> {
    let f = e.family(
        "teamshare_gpu_equivalents_in_use",
        Kind::Gauge,
        "GPU-equivalents held by the team's running jobs at the governor's last pass (a slice counts at its size, gpu_types slices_of/gpus; without slices, its GPUs), in quota and borrowed.",
        &["team", "kind"],
    )?;
    for (team, t) in &live.teams {
        let Some(c) = config.team(team) else {
            continue;
        };
        let (eq, in_eq) = equivalents(config, c, t);
        f.sample(&[team, "in_quota"], in_eq);
        f.sample(&[team, "borrowed"], eq - in_eq);
    }
    Ok(())
}

/// Whether a team's figures count a GPU family in GPU-equivalents.
fn counts_any_family(config: &Config, team: &teamshare_config::Team) -> bool {
    team.quota
        .by_type
        .keys()
        .any(|k| config.family_units(k).is_some())
}

/// A team's running GPU-equivalents and those in its quota (its quota in equivalents: a
/// family's count as is, a slice type's count at its size).
fn equivalents(config: &Config, team: &teamshare_config::Team, t: &LiveTeam) -> (f64, f64) {
    let typed: u32 = t.running_by_type.values().sum();
    let eq = t
        .running_by_type
        .iter()
        .map(|(k, n)| f64::from(*n) * config.gpu_equivalents(k))
        .sum::<f64>()
        + f64::from(t.running_gpus.saturating_sub(typed));
    let quota: f64 = if team.quota.is_typed() {
        team.quota
            .by_type
            .iter()
            .map(|(k, n)| f64::from(*n) * config.gpu_equivalents(k))
            .sum()
    } else {
        f64::from(team.quota.total)
    };
    (eq, eq.min(quota))
}

/// The month so far, from the database: usage, fair-share and cost.
fn month_families(e: &Exposition, m: &MonthFigures) -> Result<(), prometheus::Error> {
    let f = e.family(
        "teamshare_month_gpu_seconds",
        Kind::Gauge,
        "GPU-seconds this month so far (accountd report teams' hours x 3600): allocated = in_quota + borrowed; lent is what other teams borrowed of the team's idle quota ((pool): of unallocated capacity). Resets at the start of each month (local time).",
        &["team", "kind"],
    )?;
    for r in &m.teams.rows {
        match r.kind {
            RowKind::Team | RowKind::Account => {
                f.sample(&[&r.team, "allocated"], r.gpu_hours() * 3600.0);
                f.sample(&[&r.team, "in_quota"], r.in_quota_hours() * 3600.0);
                f.sample(&[&r.team, "borrowed"], r.borrowed_hours() * 3600.0);
                f.sample(&[&r.team, "lent"], r.lent_hours() * 3600.0);
            }
            RowKind::Pool => f.sample(&[POOL, "lent"], r.lent_hours() * 3600.0),
            RowKind::Idle => {}
        }
    }

    let f = e.family(
        "teamshare_fairshare_factor",
        Kind::Gauge,
        "Slurm classic fair-share factor 2^(-U/S/d) of the team now (0..1; 0.5 = used exactly its share).",
        &["team"],
    )?;
    for r in &m.fairshare.rows {
        f.sample(&[&r.team], r.factor);
    }

    let currency = m.teams.currency.as_deref().unwrap_or("");
    let f = e.family(
        "teamshare_month_cost",
        Kind::Gauge,
        "Cost this month so far: allocated cost (borrowed hours at the borrowed factor) plus the team's share of the idle capacity cost; (idle) holds what no team is charged. The rows add up to the capacity cost. Resets at the start of each month (local time).",
        &["team", "currency"],
    )?;
    for r in &m.teams.rows {
        if r.kind == RowKind::Pool {
            continue;
        }
        if let Some(c) = r.total_cost {
            let team = if r.kind == RowKind::Idle {
                IDLE
            } else {
                &r.team
            };
            f.sample(&[team, currency], c);
        }
    }

    Ok(())
}

/// The month's jobs: their GPU utilisation, preemptions and admission waits.
fn month_job_families(e: &Exposition, m: &MonthFigures) -> Result<(), prometheus::Error> {
    let f = e.family(
        "teamshare_gpu_utilisation_ratio",
        Kind::Gauge,
        "Mean GPU utilisation of the team's jobs this month so far (0..1), from NVML samples.",
        &["team"],
    )?;
    for (team, u) in &m.utilisation {
        f.sample(&[team], *u);
    }

    let f = e.family(
        "teamshare_month_preempted_runs",
        Kind::Gauge,
        "Job runs Slurm preempted this month so far (sacct state PREEMPTED, by their end). Resets at the start of each month (local time).",
        &["team"],
    )?;
    for (team, n) in &m.preempted {
        f.sample(&[team], *n as f64);
    }

    let f = e.family(
        "teamshare_admission_wait_seconds",
        Kind::Gauge,
        "Mean time from submit to start of the team's job runs that started this month.",
        &["team"],
    )?;
    for (team, w) in &m.admission_wait {
        f.sample(&[team], *w);
    }
    Ok(())
}

/// The governor's requeues, the capacity it measured and when its last pass ended.
fn governor_families(e: &Exposition, live: &Live) -> Result<(), prometheus::Error> {
    let f = e.family(
        "teamshare_governor_requeues_total",
        Kind::Counter,
        "Jobs the governor requeued itself since the daemon started: reason=reclaim, to give a team its quota back when Slurm had not preempted within the fallback delay; reason=priority_class, for a higher class of the same team; reason=ceiling, a team running beyond its quota + borrow limit (a lowered limit).",
        &["team", "reason"],
    )?;
    for (team, n) in &live.reclaimed {
        f.sample(&[team, REASON_RECLAIM], *n as f64);
    }
    for (team, n) in &live.displaced {
        f.sample(&[team, REASON_PRIORITY_CLASS], *n as f64);
    }
    for (team, n) in &live.over_ceiling {
        f.sample(&[team, REASON_CEILING], *n as f64);
    }

    let f = e.family(
        "teamshare_capacity_gpus",
        Kind::Gauge,
        "Governed capacity: GPUs on usable nodes of the governed partitions, as last measured.",
        &[],
    )?;
    if let Some(c) = live.capacity {
        f.sample(&[], f64::from(c));
    }
    let f = e.family(
        "teamshare_governor_last_pass_timestamp_seconds",
        Kind::Gauge,
        "When the governor's last successful pass ended (unix seconds).",
        &[],
    )?;
    if let Some(t) = live.governor_last_pass {
        f.sample(&[], t as f64);
    }
    Ok(())
}

/// The governor's passes: how many, how long, how many Slurm calls.
fn governor_pass_families(e: &Exposition, live: &Live) -> Result<(), prometheus::Error> {
    if live.governor_passes > 0 {
        e.family(
            "teamshare_governor_passes_total",
            Kind::Counter,
            "Governor passes that completed.",
            &[],
        )?
        .sample(&[], live.governor_passes as f64);
        e.family(
            "teamshare_governor_pass_seconds_total",
            Kind::Counter,
            "Seconds the completed governor passes (read, plan, publish) took together.",
            &[],
        )?
        .sample(&[], live.governor_pass_seconds);
        e.family(
            "teamshare_governor_slurm_calls_total",
            Kind::Counter,
            "Slurm client commands (squeue, sinfo) the governor's passes ran to read Slurm (their actions are counted apart).",
            &[],
        )?
        .sample(&[], live.governor_slurm_calls as f64);
    }
    if live.governor_quiet_passes > 0 {
        e.family(
            "teamshare_governor_quiet_passes_total",
            Kind::Counter,
            "Governor passes that read no jobs and made no plan: nothing they plan from had moved (no job event, no node or partition change; the last state is published again as of now), or the last full read was too recent for its cost.",
            &[],
        )?
        .sample(&[], live.governor_quiet_passes as f64);
    }
    if let Some(d) = live.governor_last_pass_seconds {
        e.family(
            "teamshare_governor_last_pass_seconds",
            Kind::Gauge,
            "How long the governor's last completed pass took to read Slurm, plan and publish.",
            &[],
        )?
        .sample(&[], d);
    }
    if let Some(n) = live.governor_last_pass_slurm_calls {
        e.family(
            "teamshare_governor_last_pass_slurm_calls",
            Kind::Gauge,
            "Slurm client commands the governor's last completed pass ran.",
            &[],
        )?
        .sample(&[], n as f64);
    }
    Ok(())
}

/// The governor's actions on plans: how many, how long, how many Slurm calls.
fn governor_act_families(e: &Exposition, live: &Live) -> Result<(), prometheus::Error> {
    if live.governor_acts > 0 {
        e.family(
            "teamshare_governor_acts_total",
            Kind::Counter,
            "Plans the governor finished acting on (limits, requeues, priorities, parking, holds), beside its passes.",
            &[],
        )?
        .sample(&[], live.governor_acts as f64);
        e.family(
            "teamshare_governor_act_seconds_total",
            Kind::Counter,
            "Seconds the governor's actions on plans took together.",
            &[],
        )?
        .sample(&[], live.governor_act_seconds);
        e.family(
            "teamshare_governor_act_slurm_calls_total",
            Kind::Counter,
            "Calls to Slurm (RPCs in process and client commands) the governor's actions on plans made.",
            &[],
        )?
        .sample(&[], live.governor_act_slurm_calls as f64);
        e.family(
            "teamshare_governor_act_processes_total",
            Kind::Counter,
            "Processes the governor's actions on plans started: its limits helper when it \
             starts (again); with the client commands, one per command.",
            &[],
        )?
        .sample(&[], live.governor_act_processes as f64);
    }
    if let Some(d) = live.governor_last_act_seconds {
        e.family(
            "teamshare_governor_last_act_seconds",
            Kind::Gauge,
            "How long the governor's last finished actions on a plan took.",
            &[],
        )?
        .sample(&[], d);
    }
    if let Some(n) = live.governor_last_act_slurm_calls {
        e.family(
            "teamshare_governor_last_act_slurm_calls",
            Kind::Gauge,
            "Slurm client commands the governor's last finished actions on a plan ran.",
            &[],
        )?
        .sample(&[], n as f64);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The exporter: live values, and the month's figures cached

#[derive(Default)]
struct MonthCache {
    figures: Option<MonthFigures>,
    computed_at: Option<Instant>,
}

/// The daemon's metrics: it updates [`Live`]; scrapes read both sources.
pub struct Exporter {
    /// Replaced when the daemon reloads teamshare.toml.
    config: Mutex<Config>,
    database: PathBuf,
    live: Mutex<Live>,
    counters: Mutex<Counters>,
    idle: Mutex<IdleFigures>,
    month: Mutex<MonthCache>,
}

/// A poisoned lock still holds plain data: use it (a scrape must never panic).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Exporter {
    pub fn new(config: Config, database: PathBuf) -> Exporter {
        Exporter {
            config: Mutex::new(config),
            database,
            live: Mutex::new(Live::default()),
            counters: Mutex::new(Counters::default()),
            idle: Mutex::new(IdleFigures::default()),
            month: Mutex::new(MonthCache::default()),
        }
    }

    /// A reloaded configuration: quotas, rates and teams from now on, and the month's figures
    /// computed again at the next scrape.
    pub fn set_config(&self, config: Config) {
        *lock(&self.config) = config;
        lock(&self.month).computed_at = None;
    }

    pub fn update_live(&self, f: impl FnOnce(&mut Live)) {
        f(&mut lock(&self.live));
    }

    pub fn live(&self) -> Live {
        lock(&self.live).clone()
    }

    pub fn update_counters(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut lock(&self.counters));
    }

    pub fn counters(&self) -> Counters {
        *lock(&self.counters)
    }

    pub fn update_idle(&self, f: impl FnOnce(&mut IdleFigures)) {
        f(&mut lock(&self.idle));
    }

    /// The exposition now. The month's figures are computed again when older than
    /// [`MONTH_REFRESH`]; when that fails, the last figures are served and the error returned
    /// beside the text (retried after the same delay).
    pub fn scrape(&self) -> (String, Option<String>) {
        let mut error = None;
        let config = lock(&self.config).clone();
        let mut cache = lock(&self.month);
        if cache
            .computed_at
            .is_none_or(|t| t.elapsed() >= MONTH_REFRESH)
        {
            cache.computed_at = Some(Instant::now());
            let figures = Store::open(&self.database)
                .map_err(MetricsError::from)
                .and_then(|store| month_figures(&store, &config, period::now(), &chrono::Local));
            match figures {
                Ok(f) => cache.figures = Some(f),
                Err(e) => error = Some(format!("{e}")),
            }
        }
        let live = self.live();
        let mut text = render(&config, &live, cache.figures.as_ref());
        text.push_str(&render_counters(&self.counters()));
        text.push_str(&render_idle(&config, &lock(&self.idle)));
        (text, error)
    }
}

#[cfg(test)]
mod tests;
