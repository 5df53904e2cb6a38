//! A study: a trace replayed under candidate configurations, with the calibration of the
//! settings it ran under against the history and, if asked, a capacity curve; the figures per
//! team side by side, as the renderers take them ([`Replay`]). Where the trace has GPU
//! samples, the baseline is simulated once more with rule 3's idle-first order the other way,
//! for the work idle-first reclaim would have saved ([`super::idle_first`]).
//!
//! The caller (`accountd replay`) reads the trace and the configurations, builds the
//! [`Study`] and renders what [`Study::run`] finds. The study prints nothing: it says how far
//! its simulations are through a [`Progress`] the caller supplies.

mod batch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use teamshare_config::{Config, ReclaimMode};

use super::calibrate::{self, Calibration, Tolerance};
use super::idle_first::{self, lost_work, with_idle_first, IdleFirst, LostWork};
use super::metrics::{self, figures, worse_off};
use super::render::{Column, Curve, CurvePoint, Replay, AS_TODAY, PLAIN_SLURM, SILOED};
use super::{curve as replay_curve, Outcome, Secs, SimParams, Trace};

use batch::{curve_plan, simulate, simulate_all, CurvePlan, CurvePlanPoint, Run};
pub use batch::{total_gpus, without_gpus};

/// What a study replays: a trace, the settings it ran under, the candidates and the
/// parameters.
#[derive(Debug, Clone)]
pub struct Study {
    pub trace: Trace,
    /// Lines saying what was read to make the trace (and what was left out, why): the first
    /// of the notes.
    pub read: Vec<String>,
    /// The settings the history ran under: calibrated against it (unless
    /// [`Params::skip_calibration`]), and the configuration of as-today's figures.
    pub current: Option<Settings>,
    /// The configuration as-today's figures are computed under where there are no
    /// [`Study::current`] settings.
    pub config: Config,
    /// The candidates in their order: the first is the baseline, every other simulated one is
    /// compared with it (see [`baseline_first`]).
    pub candidates: Vec<Candidate>,
    pub params: Params,
}

/// A configuration with the file it was read from.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The file ([`PLAIN_SLURM`] for the plain Slurm model of the configuration): a candidate
    /// of the same [`Candidate::path`] reuses the calibration's simulation.
    pub path: PathBuf,
    pub config: Config,
}

/// A candidate ready to replay.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub name: String,
    /// None: "as today" (the history, not simulated).
    pub config: Option<Config>,
    /// The file it was read from (to reuse the calibration's simulation).
    pub path: Option<PathBuf>,
}

/// The study's parameters beside its trace and candidates.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// How long a requeued job waits before it may start again; None: Slurm's delay as the
    /// governor lifts it ([`crate::requeue_delay::GOVERNED_DELAY_SECS`]), 0 under
    /// `reclaim_mode = "cancel"`.
    pub requeue_delay: Option<Secs>,
    /// Classes or accounts whose jobs checkpoint, with their interval, in the order given (a
    /// later one of the same name wins).
    pub checkpoints: Vec<(String, Secs)>,
    /// How far the calibration's simulated waits may be from the observed ones.
    pub tolerance: Tolerance,
    /// No calibration: the what-ifs whether the model fits the history or not.
    pub skip_calibration: bool,
    /// The constant capacity the trace was given instead of its history's (said in the notes).
    pub capacity: Option<u32>,
    /// The capacity curve, if any.
    pub curve: Option<CurveParams>,
    /// How many simulations run side by side ([`default_threads`]).
    pub threads: usize,
}

/// A capacity curve: each simulated candidate also at `points` smaller capacities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CurveParams {
    /// K: the capacities C - i x step, i = 1..K (those above 0).
    pub points: u32,
    /// GPUs taken away at each step; None: the trace's most common node size.
    pub step: Option<u32>,
    /// What a smaller capacity does with quotas that no longer fit.
    pub quotas: replay_curve::QuotaRule,
}

/// What a study finds.
#[derive(Debug, Clone, PartialEq)]
pub enum Findings {
    /// The figures of every candidate (and the curve, the calibration where made).
    Complete(Replay),
    /// The model does not fit the history: the calibration alone, no column, no curve.
    Misfit(Replay),
}

impl Findings {
    /// What is rendered, whichever it is.
    pub fn replay(&self) -> &Replay {
        match self {
            Findings::Complete(r) | Findings::Misfit(r) => r,
        }
    }
}

/// How far a study's simulations are, told to whoever shows it. The runs of a batch are told
/// from several threads at once.
pub trait Progress: Sync {
    /// A batch of simulations starts: one run per label, on `threads` threads.
    fn begin(&self, labels: Vec<String>, threads: usize);
    /// Run `run` of the batch has simulated the trace up to `t`.
    fn at(&self, run: usize, t: Secs);
    /// Run `run` of the batch is done.
    fn done(&self, run: usize);
    /// The batch is over.
    fn end(&self);
}

/// No progress shown.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn begin(&self, _: Vec<String>, _: usize) {}
    fn at(&self, _: usize, _: Secs) {}
    fn done(&self, _: usize) {}
    fn end(&self) {}
}

/// The threads simulations run on by default: one more than the CPUs this process may use.
pub fn default_threads() -> usize {
    // One thread more than CPUs: runs differ in length, and with one per CPU the last one
    // ran alone while the other CPUs idled (the 10-point curve of the synthetic year on two
    // CPUs: 59.7 s on 2 threads, 55.8 s on 3; docs/design/replay.md).
    std::thread::available_parallelism().map_or(1, usize::from) + 1
}

/// A candidate as named: by its name, else a teamshare.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CandidateKind {
    AsToday,
    Siloed,
    PlainSlurm,
    File(PathBuf),
}

impl CandidateKind {
    /// [`AS_TODAY`], [`SILOED`], [`PLAIN_SLURM`], else the path of a configuration.
    pub fn parse(text: &str) -> Self {
        match text {
            AS_TODAY => CandidateKind::AsToday,
            SILOED => CandidateKind::Siloed,
            PLAIN_SLURM => CandidateKind::PlainSlurm,
            path => CandidateKind::File(PathBuf::from(path)),
        }
    }
}

/// The candidates where none are given: the baseline, the model of the settings the history
/// ran under (`current`, their file; None: plain Slurm), then the observed history beside it,
/// siloed, and the configuration (`config_path`) where it is not the baseline.
pub fn default_candidates(config_path: &Path, current: Option<PathBuf>) -> Vec<CandidateKind> {
    let mut out = vec![
        current
            .clone()
            .map_or(CandidateKind::PlainSlurm, CandidateKind::File),
        CandidateKind::AsToday,
        CandidateKind::Siloed,
    ];
    if current.as_deref() != Some(config_path) {
        out.push(CandidateKind::File(config_path.to_path_buf()));
    }
    out
}

/// The candidates given, with the first simulated one moved to the front where the observed
/// history came first: what-ifs compare simulated with simulated, and the history is the
/// calibration beside the baseline, never the yardstick.
pub fn baseline_first(mut given: Vec<CandidateKind>) -> Vec<CandidateKind> {
    if let Some(i) = given
        .iter()
        .position(|c| !matches!(c, CandidateKind::AsToday))
    {
        let first = given.remove(i);
        given.insert(0, first);
    }
    given
}

impl Study {
    /// The calibration, then (where the model fits or the calibration is skipped) every
    /// candidate and the capacity curve's points, simulated side by side.
    pub fn run(&self, progress: &dyn Progress) -> Findings {
        let trace = &self.trace;
        let params = &self.params;
        let checkpoint: BTreeMap<String, Secs> = params.checkpoints.iter().cloned().collect();
        let params_for = |c: &Config| self.sim_params(&checkpoint, c);
        let mut notes = notes(params, trace);
        notes.splice(0..0, self.read.iter().cloned());
        notes.extend(self.equivalents_note());

        // Calibration: the current settings against the history.
        let (calibration, cached) = calibration(
            trace,
            self.current.as_ref(),
            params.skip_calibration,
            params.tolerance,
            &params_for,
            progress,
        );
        if let Some(cal) = calibration.as_ref().filter(|c| !c.fits) {
            return Findings::Misfit(Replay {
                source: trace.source.clone(),
                since: trace.since,
                until: trace.until,
                columns: Vec::new(),
                calibration: Some(cal.clone()),
                curve: None,
                idle_first: None,
                notes,
            });
        }

        // The candidates at the trace's capacity, then the capacity curve: every simulation is
        // independent of the others, so they run side by side; each result keeps its place.
        let full = total_gpus(trace);
        let curve = params.curve.map(|c| {
            let step = c.step.unwrap_or_else(|| replay_curve::default_step(trace));
            (c, step)
        });
        let plan = curve.map_or_else(CurvePlan::default, |(c, step)| {
            curve_plan(trace, &self.candidates, c.points, c.quotas, step)
        });
        let (columns, idle_first, mut curve_results) =
            self.simulate_candidates(cached.as_ref(), &plan, &params_for, progress);
        let curve = curve.map(|(c, step)| {
            let results = curve_results.as_mut_slice();
            let points = curve_points(&self.candidates, &columns, &plan.points, results, full);
            let reference = columns
                .first()
                .and_then(|c| c.figures.cluster().wait.p95_secs);
            let tolerance = params.tolerance;
            Curve::new(
                full,
                step,
                reference,
                tolerance,
                points,
                c.quotas,
                plan.skipped,
            )
        });

        Findings::Complete(Replay {
            source: trace.source.clone(),
            since: trace.since,
            until: trace.until,
            columns,
            calibration,
            curve,
            idle_first,
            notes,
        })
    }

    /// Every simulated candidate (or the calibration's simulation of it), the baseline's
    /// idle-first twin where the trace has samples, and the curve's points (`plan`), simulated
    /// side by side: the candidates' columns, idle-first's saving, and the figures of the
    /// curve's points in the plan's order.
    fn simulate_candidates(
        &self,
        cached: Option<&(PathBuf, Outcome)>,
        plan: &CurvePlan,
        params_for: &dyn Fn(&Config) -> SimParams,
        progress: &dyn Progress,
    ) -> (
        Vec<Column>,
        Option<IdleFirst>,
        Vec<Option<metrics::Figures>>,
    ) {
        let trace = &self.trace;
        let twin = self.idle_first_twin();
        let (runs, column_runs, twin_run) =
            runs(&self.candidates, cached, plan, params_for, twin.as_ref());
        let first_curve_run = runs.len() - plan.points.len();
        let (mut results, lost): (Vec<Option<metrics::Figures>>, Vec<LostWork>) =
            simulate_all(trace, &runs, self.params.threads, progress)
                .into_iter()
                .map(|found| (Some(found.figures), found.lost))
                .unzip();
        let figures_config = self.current.as_ref().map_or(&self.config, |s| &s.config);
        let columns = columns(
            trace,
            &self.candidates,
            &column_runs,
            &mut results,
            cached,
            figures_config,
        );
        let twins = (twin_run, column_runs.as_slice(), lost.as_slice());
        let idle_first = self.idle_first(twins, cached, &columns);
        let curve_results = results.split_off(first_curve_run);
        (columns, idle_first, curve_results)
    }

    /// The baseline (the first simulated candidate, by its place) with rule 3's idle-first
    /// order the other way, simulated beside it where the trace has GPU samples.
    fn idle_first_twin(&self) -> Option<(usize, Config)> {
        self.trace.activity.as_ref()?;
        let base = self.candidates.iter().position(|c| c.config.is_some())?;
        let config = self.candidates[base].config.as_ref()?;
        let other = with_idle_first(config, !config.governance.idle_first_reclaim);
        Some((base, other))
    }

    /// What idle-first reclaim would have saved under the baseline: its run's lost work
    /// against its twin's (`twins`: the twin's run, each candidate's run, every run's lost
    /// work); "no samples" without them; none without a simulated candidate.
    fn idle_first(
        &self,
        (twin_run, column_runs, lost): (Option<usize>, &[Option<usize>], &[LostWork]),
        cached: Option<&(PathBuf, Outcome)>,
        columns: &[Column],
    ) -> Option<IdleFirst> {
        let base = self.candidates.iter().position(|c| c.config.is_some())?;
        let candidate = &self.candidates[base];
        if self.trace.activity.is_none() {
            return Some(idle_first::no_samples(&candidate.name, &self.trace));
        }
        let twin = &lost[twin_run?];
        let own = match column_runs[base] {
            Some(r) => lost[r].clone(),
            None => lost_work(&self.trace, &cached?.1),
        };
        let on = candidate.config.as_ref()?.governance.idle_first_reclaim;
        let (today, first) = if on { (twin, &own) } else { (&own, twin) };
        let teams = columns[base]
            .figures
            .teams()
            .iter()
            .map(|t| t.team.as_str());
        let saving = idle_first::saving(&candidate.name, teams, today, first);
        Some(IdleFirst::Computed(saving))
    }

    /// A simulation's parameters under configuration `c`.
    fn sim_params(&self, checkpoint: &BTreeMap<String, Secs>, c: &Config) -> SimParams {
        SimParams {
            requeue_delay: self.params.requeue_delay.unwrap_or(
                if c.governance.reclaim_mode == ReclaimMode::Cancel {
                    0
                } else {
                    crate::requeue_delay::GOVERNED_DELAY_SECS
                },
            ),
            checkpoint: checkpoint.clone(),
            ..SimParams::default()
        }
    }
}

/// The calibration of the current settings against the history (none when skipped or
/// without them), and the simulation it made, with the settings' file, for reuse.
fn calibration(
    trace: &Trace,
    current: Option<&Settings>,
    skip: bool,
    tolerance: Tolerance,
    params_for: &dyn Fn(&Config) -> SimParams,
    progress: &dyn Progress,
) -> (Option<Calibration>, Option<(PathBuf, Outcome)>) {
    match (current, skip) {
        (Some(Settings { path, config }), false) => {
            let params = params_for(config);
            let outcome = simulate(trace, config, &params, "the current settings", progress);
            let observed = figures(trace, &super::observed(trace), config);
            let like_history = super::without_unknown_waits(trace, &outcome);
            let simulated = figures(trace, &like_history, config);
            let cached = Some((path.clone(), outcome));
            (
                Some(calibrate::calibrate(
                    trace, &observed, &simulated, tolerance,
                )),
                cached,
            )
        }
        _ => (None, None),
    }
}

/// The simulations to run: each simulated candidate not reusing the calibration's, the
/// baseline's idle-first twin if any (`twin`: the candidate's place and configuration), then
/// the capacity curve's points; per candidate, its place among them; the twin's place.
fn runs<'c>(
    candidates: &'c [Candidate],
    cached: Option<&(PathBuf, Outcome)>,
    plan: &'c CurvePlan,
    params_for: &dyn Fn(&Config) -> SimParams,
    twin: Option<&'c (usize, Config)>,
) -> (Vec<Run<'c>>, Vec<Option<usize>>, Option<usize>) {
    let mut runs: Vec<Run<'_>> = Vec::new();
    let mut column_runs: Vec<Option<usize>> = Vec::new();
    for c in candidates {
        let Some(cfg) = &c.config else {
            column_runs.push(None);
            continue;
        };
        let reused = cached.is_some_and(|(p, _)| c.path.as_deref() == Some(p.as_path()));
        if reused {
            column_runs.push(None);
            continue;
        }
        column_runs.push(Some(runs.len()));
        runs.push(Run {
            label: c.name.clone(),
            config: cfg,
            params: params_for(cfg),
            gpus: None,
        });
    }
    let twin_run = twin.map(|(base, config)| {
        runs.push(Run {
            label: format!(
                "{} with idle_first_reclaim = {}",
                candidates[*base].name, config.governance.idle_first_reclaim
            ),
            config,
            params: params_for(config),
            gpus: None,
        });
        runs.len() - 1
    });
    for p in &plan.points {
        runs.push(Run {
            label: format!("{} at {} GPUs", candidates[p.candidate].name, p.gpus),
            config: &p.config,
            params: params_for(&p.config),
            gpus: Some(p.gpus),
        });
    }
    (runs, column_runs, twin_run)
}

/// The candidates' columns: the history's figures for as-today, each simulated one's from its
/// run (or the calibration's), and who is worse off than under the first.
fn columns(
    trace: &Trace,
    candidates: &[Candidate],
    column_runs: &[Option<usize>],
    results: &mut [Option<metrics::Figures>],
    cached: Option<&(PathBuf, Outcome)>,
    figures_config: &Config,
) -> Vec<Column> {
    let mut columns: Vec<Column> = Vec::new();
    for (c, run) in candidates.iter().zip(column_runs) {
        let figures = match (&c.config, run) {
            (None, _) => figures(trace, &super::observed(trace), figures_config),
            (Some(_), Some(r)) => results[*r]
                .take()
                .expect("each run's figures are taken once"),
            (Some(cfg), None) => {
                let (_, outcome) = cached.expect("a candidate not run reuses the calibration's");
                figures(trace, outcome, cfg)
            }
        };
        columns.push(Column {
            candidate: c.name.clone(),
            figures,
            worse_off: Vec::new(),
        });
    }
    if let Some((first, rest)) = columns.split_first_mut() {
        for col in rest.iter_mut().filter(|c| c.candidate != AS_TODAY) {
            col.worse_off = worse_off(&first.figures, &col.figures);
        }
    }
    columns
}

/// The capacity curve's points: each simulated candidate as configured, then each point of
/// the plan with the figures of its run (`results`, the curve's runs in the plan's order).
fn curve_points(
    candidates: &[Candidate],
    columns: &[Column],
    plan: &[CurvePlanPoint],
    results: &mut [Option<metrics::Figures>],
    full: u32,
) -> Vec<CurvePoint> {
    let mut points = Vec::new();
    for (c, col) in candidates.iter().zip(columns) {
        if c.config.is_some() {
            points.push(CurvePoint::of(&c.name, full, "as configured", &col.figures));
        }
    }
    for (i, p) in plan.iter().enumerate() {
        let figures = results[i]
            .take()
            .expect("each run's figures are taken once");
        let name = &candidates[p.candidate].name;
        points.push(CurvePoint::of(name, p.gpus, &p.quotas, &figures));
    }
    points
}

impl Study {
    /// Where a configuration declares GPU slices (issue 30), what its GPU-hours mean.
    fn equivalents_note(&self) -> Option<String> {
        let sliced = std::iter::once(&self.config)
            .chain(self.candidates.iter().filter_map(|c| c.config.as_ref()))
            .find(|c| c.has_slices())?;
        let sizes: Vec<String> = sliced
            .gpu_types
            .iter()
            .filter_map(|(name, t)| {
                let s = t.slice.as_ref()?;
                Some(format!(
                    "{name} {}/{} of {}",
                    s.numerator, s.denominator, s.of
                ))
            })
            .collect();
        Some(format!(
            "GPU-hours are GPU-equivalents: a slice's hour counts its size ({}); GPU-hours idle while a job waited count each slice as a GPU",
            sizes.join(", ")
        ))
    }
}

/// What the figures rest on, said under them.
fn notes(params: &Params, trace: &Trace) -> Vec<String> {
    let mut notes = vec![
        "a job that never started is replayed with its time limit as its run time".to_string(),
        "a job that never started counts its wait up to its cancellation or the end of the period (censored)".to_string(),
        "the history marks no run as borrowed and no job as in quota: as-today has no reclaim latency or in-quota start".to_string(),
        format!(
            "requeue delay {}; checkpointing: {}",
            params.requeue_delay.map_or(format!("{}s, Slurm's 121 s as the governor lifts it (0 under reclaim_mode = cancel)", crate::requeue_delay::GOVERNED_DELAY_SECS), |d| format!("{d}s")),
            if params.checkpoints.is_empty() {
                "none (a preempted job loses all its work)".to_string()
            } else {
                params.checkpoints
                    .iter()
                    .map(|(n, s)| format!("{n} every {}", metrics::duration(*s)))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
    ];
    let unknown = trace.jobs.iter().filter(|j| j.observed.wait_unknown);
    let (waits, runs) = unknown.fold((0, 0), |(w, r), j| {
        (w + 1, r + usize::from(j.observed.runs.is_empty()))
    });
    if waits > 0 {
        notes.push(format!(
            "{waits} jobs have no recorded wait (-1): their waits are left out of as-today and of the calibration, and their runs are placed at their submission{}",
            if runs > 0 { format!("; {runs} of them have no recorded run time either, and no GPU-hours in as-today") } else { String::new() }
        ));
    }
    if let Some(n) = params.capacity {
        notes.push(format!(
            "constant capacity of {n} GPUs (--capacity), in nodes of {} GPUs, no drains",
            replay_curve::default_step(trace)
        ));
    }
    if let Some(activity) = &trace.activity {
        notes.push(activity.describe(trace));
    }
    notes.push(format!(
        "{} jobs, {} GPUs on {} nodes",
        trace.jobs.len(),
        total_gpus(trace),
        trace.cluster.nodes.len()
    ));
    notes
}

#[cfg(test)]
mod tests;
