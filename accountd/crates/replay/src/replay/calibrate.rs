//! Calibration: does the simulation of the settings the history ran under reproduce the
//! history? If it does not, the what-ifs are not to be trusted.
//!
//! Per team (and for the cluster), the simulated figures of the current settings are compared
//! with the observed ones ([`super::observed`]):
//! - p50 and p95 queue wait: within max(`tolerance.secs`, `tolerance.pct` % of the observed);
//! - allocated GPU-hours (the utilisation): within [`GPU_HOURS_TOLERANCE_PCT`] % of the
//!   observed, and at least [`GPU_HOURS_FLOOR`] GPU-hours (so that a team with almost no usage
//!   does not fail on a rounding).
//!
//! Where it does not fit, [`hints`] says what in the trace the simulation cannot know of.

use std::collections::BTreeMap;

use serde::Serialize;

use super::metrics::{duration, Figures, TeamFigures};
use super::{sim, Secs, Trace};

/// The default tolerance on waits, in percent of the observed...
pub const DEFAULT_TOLERANCE_PCT: f64 = 25.0;
/// ...and at least this many seconds.
pub const DEFAULT_TOLERANCE_SECS: Secs = 120;
/// The tolerance on allocated GPU-hours, in percent of the observed...
pub const GPU_HOURS_TOLERANCE_PCT: f64 = 10.0;
/// ...and at least this many GPU-hours.
pub const GPU_HOURS_FLOOR: f64 = 1.0;
/// A job eligible this long after its submission (begin time, dependency) is worth a hint.
pub const LATE_ELIGIBLE_SECS: Secs = 3600;

/// How far simulated waits may be from the observed ones.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tolerance {
    pub pct: f64,
    pub secs: Secs,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            pct: DEFAULT_TOLERANCE_PCT,
            secs: DEFAULT_TOLERANCE_SECS,
        }
    }
}

impl Tolerance {
    /// What a wait of `observed` seconds may be off by.
    pub fn allowed(&self, observed: f64) -> f64 {
        (self.secs as f64).max(observed.abs() * self.pct / 100.0)
    }
}

/// A measure calibration compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    P50Wait,
    P95Wait,
    AllocatedGpuHours,
}

impl Measure {
    pub fn label(self) -> &'static str {
        match self {
            Measure::P50Wait => "p50 wait",
            Measure::P95Wait => "p95 wait",
            Measure::AllocatedGpuHours => "allocated GPU-h",
        }
    }

    /// A value of this measure as the reports show it.
    pub fn show(self, value: Option<f64>) -> String {
        match (self, value) {
            (_, None) => "-".to_string(),
            (Measure::AllocatedGpuHours, Some(v)) => format!("{v:.1}"),
            (_, Some(v)) => duration(v.round() as Secs),
        }
    }
}

/// One team's one measure: observed, simulated, how far apart they may be.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationRow {
    pub team: String,
    pub measure: Measure,
    /// Seconds for waits, GPU-hours for GPU-hours; None: no job to measure.
    pub observed: Option<f64>,
    pub simulated: Option<f64>,
    /// How far apart they may be, in the same unit.
    pub allowed: f64,
    pub fits: bool,
}

/// The comparison of the simulated current settings with the history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    /// Every row fits.
    pub fits: bool,
    pub tolerance: Tolerance,
    /// Per team by name, then the cluster; per measure in [`Measure`]'s order.
    pub rows: Vec<CalibrationRow>,
    /// When it does not fit: what in the trace may explain it (empty when it fits).
    pub hints: Vec<String>,
}

impl Calibration {
    /// The rows that do not fit.
    pub fn misfits(&self) -> impl Iterator<Item = &CalibrationRow> {
        self.rows.iter().filter(|r| !r.fits)
    }
}

/// Compare `simulated` (the current settings replayed) with `observed` (the history's figures)
/// over the rows of `observed`.
pub fn calibrate(
    trace: &Trace,
    observed: &Figures,
    simulated: &Figures,
    tolerance: Tolerance,
) -> Calibration {
    let mut rows = Vec::new();
    let empty = TeamFigures::default();
    for o in &observed.rows {
        let s = simulated.row(&o.team).unwrap_or(&empty);
        let secs = |v: Option<Secs>| v.map(|v| v as f64);
        for (measure, obs, sim) in [
            (
                Measure::P50Wait,
                secs(o.wait.p50_secs),
                secs(s.wait.p50_secs),
            ),
            (
                Measure::P95Wait,
                secs(o.wait.p95_secs),
                secs(s.wait.p95_secs),
            ),
            (
                Measure::AllocatedGpuHours,
                Some(o.allocated_gpu_hours),
                Some(s.allocated_gpu_hours),
            ),
        ] {
            let allowed = match measure {
                Measure::AllocatedGpuHours => {
                    GPU_HOURS_FLOOR.max(obs.unwrap_or(0.0).abs() * GPU_HOURS_TOLERANCE_PCT / 100.0)
                }
                _ => tolerance.allowed(obs.unwrap_or(0.0)),
            };
            let fits = match (obs, sim) {
                (Some(a), Some(b)) => (a - b).abs() <= allowed,
                (None, None) => true,
                _ => false,
            };
            rows.push(CalibrationRow {
                team: o.team.clone(),
                measure,
                observed: obs,
                simulated: sim,
                allowed,
                fits,
            });
        }
    }
    let fits = rows.iter().all(|r| r.fits);
    Calibration {
        fits,
        tolerance,
        rows,
        hints: if fits { Vec::new() } else { hints(trace) },
    }
}

/// What in `trace` a simulation cannot reproduce, one sentence each, in a fixed order: held
/// jobs, jobs eligible long after their submission, drains, jobs still pending at the end,
/// and observed runs holding more GPUs than the trace's cluster has.
pub fn hints(trace: &Trace) -> Vec<String> {
    let mut out = Vec::new();
    let per_team = |pick: &dyn Fn(&super::TraceJob) -> bool| -> BTreeMap<&str, usize> {
        let mut m = BTreeMap::new();
        for j in trace.jobs.iter().filter(|j| pick(j)) {
            *m.entry(j.team.as_str()).or_insert(0) += 1;
        }
        m
    };
    let list = |m: &BTreeMap<&str, usize>| {
        m.iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let total = |m: &BTreeMap<&str, usize>| m.values().sum::<usize>();

    let held = per_team(&|j| j.observed.held);
    if !held.is_empty() {
        out.push(format!(
            "{} jobs were held by a user or an administrator at some point ({}): the simulation \
             does not hold them, so their observed waits are longer than it can reproduce",
            total(&held),
            list(&held)
        ));
    }
    let late = per_team(&|j| j.eligible - j.submit > LATE_ELIGIBLE_SECS);
    if !late.is_empty() {
        out.push(format!(
            "{} jobs became eligible more than {} after their submission (begin times, \
             dependencies: {}): waits count from eligibility; a dependency read wrongly shifts them",
            total(&late),
            duration(LATE_ELIGIBLE_SECS),
            list(&late)
        ));
    }
    let drained: Vec<(Secs, u32)> = trace
        .cluster
        .drains
        .iter()
        .filter_map(|d| {
            let gpus = trace.cluster.nodes.iter().find(|n| n.name == d.node)?.gpus;
            let secs = (d.until.min(trace.until) - d.since.max(trace.since)).max(0);
            Some((secs, gpus))
        })
        .filter(|(s, _)| *s > 0)
        .collect();
    if !drained.is_empty() {
        let hours: f64 = drained
            .iter()
            .map(|(s, g)| *s as f64 * f64::from(*g) / 3600.0)
            .sum();
        out.push(format!(
            "{} node drains took {hours:.1} GPU-hours of capacity away in the period: if nodes \
             went down (their jobs killed) rather than drained, or a drain is missing, waits differ",
            drained.len()
        ));
    }
    let pending = per_team(&|j| {
        j.observed.runs.is_empty() && j.cancelled_pending_at.is_none() && !j.observed.wait_unknown
    });
    if !pending.is_empty() {
        out.push(format!(
            "{} jobs were still pending at the end of the period ({}): their waits are censored \
             at the end, in the history and in the simulation alike",
            total(&pending),
            list(&pending)
        ));
    }
    if let Some((excess, secs, from)) = over_capacity(trace) {
        out.push(format!(
            "observed runs held up to {excess} GPUs more than the cluster has, for {} from {}: a \
             node is missing from the trace's cluster (or a reservation held capacity the \
             history does not show)",
            duration(secs),
            crate::period::format_rfc3339(from)
        ));
    }
    out
}

/// Where the observed runs held more GPUs than the trace's capacity: the largest excess, how
/// long in all, and its first instant.
fn over_capacity(trace: &Trace) -> Option<(u32, Secs, Secs)> {
    let total: u32 = trace.cluster.nodes.iter().map(|n| n.gpus).sum();
    let steps = sim::capacity_steps(&trace.cluster, trace.since, total);
    // (instant, change of GPUs held, change of capacity)
    let mut changes: Vec<(Secs, i64, i64)> = Vec::new();
    let mut last = 0i64;
    for (i, (t, gpus)) in steps.iter().enumerate() {
        let g = i64::from(*gpus);
        changes.push((if i == 0 { Secs::MIN } else { *t }, 0, g - last));
        last = g;
    }
    for j in &trace.jobs {
        for (start, end) in &j.observed.runs {
            let end = end.unwrap_or(trace.until);
            if end > *start {
                changes.push((*start, i64::from(j.gpus), 0));
                changes.push((end, -i64::from(j.gpus), 0));
            }
        }
    }
    // At one instant, ends (negative) before starts.
    changes.sort_unstable();
    let (mut held, mut capacity) = (0i64, 0i64);
    let (mut worst, mut over_secs, mut first) = (0i64, 0i64, None);
    for (k, (t, dh, dc)) in changes.iter().enumerate() {
        held += dh;
        capacity += dc;
        let next = changes.get(k + 1).map_or(*t, |c| c.0);
        if held > capacity && next > *t {
            worst = worst.max(held - capacity);
            over_secs += next - t;
            first.get_or_insert(*t);
        }
    }
    first.map(|f| (u32::try_from(worst).unwrap_or(u32::MAX), over_secs, f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::metrics::figures;
    use crate::replay::metrics::tests::{config, job, trace_and_outcome, H, T0};
    use crate::replay::{observed, Drain};

    /// `trace_and_outcome` without its rejected job, with observed runs that match the
    /// simulated outcome.
    fn observed_like_simulated() -> (Trace, crate::replay::Outcome) {
        let (mut trace, mut outcome) = trace_and_outcome();
        trace.jobs.pop();
        outcome.jobs.pop();
        for o in &outcome.jobs {
            trace.jobs[o.job].observed.runs =
                o.runs.iter().map(|r| (r.start, Some(r.end))).collect();
        }
        (trace, outcome)
    }

    #[test]
    fn a_simulation_that_reproduces_the_history_fits() {
        let (trace, outcome) = observed_like_simulated();
        let c = config();
        let obs = figures(&trace, &observed(&trace), &c);
        let sim = figures(&trace, &outcome, &c);
        let cal = calibrate(&trace, &obs, &sim, Tolerance::default());
        assert!(cal.fits, "{:#?}", cal.misfits().collect::<Vec<_>>());
        assert!(cal.hints.is_empty());
        // 3 rows (agents, training, cluster) x 3 measures.
        assert_eq!(cal.rows.len(), 9);
    }

    #[test]
    fn a_misfit_says_where_and_gives_hints() {
        let (mut trace, mut outcome) = observed_like_simulated();
        // The simulation starts training's job 1 at once, where it waited 1 h: training's p50
        // is then 0 against 1 h (allowed: max(120 s, 15 min)).
        outcome.jobs[1].runs[0].start = T0;
        trace.jobs[1].observed.held = true;
        trace.jobs[3].submit = T0;
        // Its eligibility 8 h after submission is worth a hint, as is its pending at the end.
        trace.cluster.drains.push(Drain {
            node: "n1".into(),
            since: T0 + 9 * H,
            until: T0 + 20 * H,
        });
        // 6 GPUs at once on the 4 of n1 from T0 + 9 h: a missing node.
        let mut big = job(9, "agents", T0, 6);
        big.observed.runs = vec![(T0 + 9 * H, None)];
        trace.jobs.push(big.clone());
        outcome.jobs.push(crate::replay::JobOutcome {
            job: 4,
            runs: vec![crate::replay::metrics::run(
                T0 + 9 * H,
                T0 + 10 * H,
                false,
                false,
            )],
            ..Default::default()
        });
        let c = config();
        let obs = figures(&trace, &observed(&trace), &c);
        let sim = figures(&trace, &outcome, &c);
        let cal = calibrate(&trace, &obs, &sim, Tolerance::default());
        assert!(!cal.fits);
        let misfits: Vec<(&str, Measure)> = cal
            .misfits()
            .map(|r| (r.team.as_str(), r.measure))
            .collect();
        assert!(
            misfits.contains(&("training", Measure::P50Wait)),
            "{misfits:?}"
        );
        let row = cal
            .rows
            .iter()
            .find(|r| r.team == "training" && r.measure == Measure::P50Wait)
            .unwrap();
        assert_eq!((row.observed, row.simulated), (Some(3600.0), Some(0.0)));
        assert_eq!(row.allowed, 900.0);
        let hints = cal.hints.join("\n");
        assert!(hints.contains("1 jobs were held"), "{hints}");
        assert!(hints.contains("training 1"), "{hints}");
        assert!(hints.contains("eligible more than 1h 00m"), "{hints}");
        assert!(
            hints.contains("1 node drains took 4.0 GPU-hours"),
            "{hints}"
        );
        assert!(hints.contains("still pending at the end"), "{hints}");
        // From T0 + 9 h: 6 GPUs held on a drained node (capacity 0).
        assert!(
            hints.contains("up to 6 GPUs more than the cluster has, for 1h 00m"),
            "{hints}"
        );
    }

    #[test]
    fn the_tolerance_is_the_larger_of_seconds_and_percent() {
        let t = Tolerance::default();
        assert_eq!(t.allowed(100.0), 120.0);
        assert_eq!(t.allowed(4000.0), 1000.0);
    }
}
