//! `accountd sample`: every interval, read each GPU of this node, attach the job holding it,
//! and spool the batch durably.
//!
//! - Ticks are on the interval grid (multiples of the interval since the epoch), so a restarted
//!   sampler resumes on the same ticks and a tick is never sampled twice by one sampler.
//! - The job lookup (`scontrol`, `slurmd -G`) runs on its own thread every `job_refresh`; the
//!   NVML loop only reads the latest map, so a slow slurmctld never delays sampling.
//! - A batch that cannot be written (disk full) is kept in memory and written at a later tick,
//!   up to [`MAX_PENDING`] batches.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::gpu::{GpuError, GpuReading, Gpus};
use super::jobs::{JobLookup, JobMap, SlurmView};
use super::spool::{NodeSpool, SpoolError};
use super::Sample;
use crate::logging;

/// Batches kept in memory while the spool cannot be written.
pub const MAX_PENDING: usize = 360;

#[derive(Debug, Clone)]
pub struct SamplerSettings {
    pub node: String,
    pub interval: Duration,
    pub spool_root: PathBuf,
    pub nvml_lib: PathBuf,
    /// Sample once (the current tick) and return.
    pub once: bool,
    pub job_refresh: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Spool(#[from] SpoolError),
}

/// The node's name for Slurm: `SLURMD_NODENAME` when set (multiple-slurmd hosts), else the
/// short host name.
pub fn default_node_name() -> Option<String> {
    if let Some(n) = std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
    {
        return Some(n);
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let short = host.trim().split('.').next()?.to_string();
    (!short.is_empty()).then_some(short)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The samples of one tick.
pub fn samples_at(
    node: &str,
    tick_ms: i64,
    interval_ms: i64,
    readings: &[GpuReading],
    jobs: &JobMap,
) -> Vec<Sample> {
    readings
        .iter()
        .map(|r| {
            let job = r.minor.and_then(|m| jobs.by_minor.get(&m));
            Sample {
                node: node.to_string(),
                gpu_uuid: r.uuid.clone(),
                ts_ms: tick_ms,
                interval_ms,
                minor: r.minor,
                job_id_raw: job.map(|j| j.job_id_raw),
                job_start: job.and_then(|j| j.start),
                util_gpu: r.util_gpu,
                util_mem: r.util_mem,
                mem_used: r.mem_used,
                mem_total: Some(r.mem_total),
                processes: r.processes,
            }
        })
        .collect()
}

/// The latest job map, shared between the lookup thread and the sampling loop.
#[derive(Clone, Default)]
struct SharedJobs(Arc<Mutex<JobMap>>);

impl SharedJobs {
    fn get(&self) -> JobMap {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    fn set(&self, map: JobMap) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = map;
    }
}

/// Says a message only when it differs from the previous one under the same key (a failing
/// scontrol or a lost GPU would otherwise fill the log at every tick).
#[derive(Default)]
struct Quiet {
    last: std::collections::HashMap<&'static str, String>,
}

impl Quiet {
    fn say(&mut self, key: &'static str, message: String) {
        if self.last.get(key) != Some(&message) {
            if !message.is_empty() {
                log(&message);
            }
            self.last.insert(key, message);
        }
    }
}

/// A line of the sampler's log ([`crate::logging`]), its level read from the text's own
/// `warning: ` or `error: ` start.
fn log(text: &str) {
    for line in text.lines() {
        let level = if line.starts_with("error: ") {
            tracing::Level::ERROR
        } else if line.starts_with("warning: ") {
            tracing::Level::WARN
        } else {
            tracing::Level::INFO
        };
        logging::event(logging::SAMPLE, level, line);
    }
}

fn refresh(lookup: &mut JobLookup, shared: &SharedJobs, quiet: &mut Quiet) {
    match lookup.lookup() {
        Ok((map, problems)) => {
            shared.set(map);
            quiet.say("jobs", String::new());
            quiet.say(
                "job-problems",
                problems
                    .iter()
                    .map(|p| format!("warning: {p}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            );
        }
        // The previous map is kept: a job that ended meanwhile is still named, and the report
        // bounds samples by the job's run (docs/design/gpu-to-job-mapping.md).
        Err(e) => quiet.say(
            "jobs",
            format!("warning: cannot look up the jobs holding this node's GPUs: {e}"),
        ),
    }
}

/// Run the sampler until killed (or one tick with `once`). `view` is where the job lookup
/// reads Slurm; `None` samples every GPU with no job.
pub fn run(
    settings: &SamplerSettings,
    view: Option<Box<dyn SlurmView>>,
) -> Result<(), SamplerError> {
    let mut spool = NodeSpool::open(&settings.spool_root, &settings.node)?;
    let gpus = Gpus::open(&settings.nvml_lib)?;
    let interval_ms = i64::try_from(settings.interval.as_millis()).unwrap_or(i64::MAX);
    log(&format!(
        "sampling node {} every {} ms into {} (NVML {} from {})",
        settings.node,
        interval_ms,
        spool.dir().display(),
        gpus.driver_version().unwrap_or_else(|| "?".into()),
        gpus.path.display()
    ));
    for line in gpus.describe()? {
        log(&format!("  {line}"));
    }

    let shared = SharedJobs::default();
    let mut quiet = Quiet::default();
    if let Some(view) = view {
        start_job_lookup(view, settings, &shared, &mut quiet);
    }

    let mut pending: Vec<Vec<Sample>> = Vec::new();
    loop {
        let now = now_ms();
        let tick = if settings.once {
            now / interval_ms * interval_ms
        } else {
            let next = (now / interval_ms + 1) * interval_ms;
            thread::sleep(Duration::from_millis(
                u64::try_from(next - now).unwrap_or(0),
            ));
            next
        };
        let (readings, errors) = gpus.read()?;
        quiet.say(
            "gpus",
            errors
                .iter()
                .map(|e| format!("warning: {e}; its sample is skipped until it reads again"))
                .collect::<Vec<_>>()
                .join("\n"),
        );
        pending.push(samples_at(
            &settings.node,
            tick,
            interval_ms,
            &readings,
            &shared.get(),
        ));
        write_pending(&mut spool, &mut pending, settings.once, &mut quiet)?;
        if settings.once {
            return Ok(());
        }
    }
}

/// The first job lookup now; then, unless `once`, a thread that refreshes `shared` every
/// `job_refresh`.
fn start_job_lookup(
    view: Box<dyn SlurmView>,
    settings: &SamplerSettings,
    shared: &SharedJobs,
    quiet: &mut Quiet,
) {
    let mut lookup = JobLookup::new(view, &settings.node);
    refresh(&mut lookup, shared, quiet);
    if !settings.once {
        let (shared, refresh_every) = (shared.clone(), settings.job_refresh);
        thread::spawn(move || {
            let mut quiet = Quiet::default();
            loop {
                thread::sleep(refresh_every);
                refresh(&mut lookup, &shared, &mut quiet);
            }
        });
    }
}

/// Write the pending batches to the spool, oldest first, until one fails: with `once` that is an
/// error; otherwise the batches are kept for the next tick (the oldest dropped beyond
/// [`MAX_PENDING`]).
fn write_pending(
    spool: &mut NodeSpool,
    pending: &mut Vec<Vec<Sample>>,
    once: bool,
    quiet: &mut Quiet,
) -> Result<(), SamplerError> {
    while let Some(batch) = pending.first() {
        match spool.write_batch(batch) {
            Ok(_) => {
                pending.remove(0);
                quiet.say("spool", String::new());
            }
            Err(e) if once => return Err(e.into()),
            Err(e) => {
                if pending.len() > MAX_PENDING {
                    pending.remove(0);
                    log(&format!(
                        "error: {e}; more than {MAX_PENDING} batches waiting, the oldest is dropped"
                    ));
                } else {
                    quiet.say(
                        "spool",
                        format!("warning: {e}; the samples are kept in memory and written at the next tick"),
                    );
                }
                break;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::jobs::JobRef;

    #[test]
    fn samples_take_the_job_of_their_minor_not_their_index() {
        let reading = |index, minor, uuid: &str| GpuReading {
            index,
            uuid: uuid.into(),
            minor,
            util_gpu: 10,
            util_mem: 1,
            mem_used: 5,
            mem_total: 10,
            processes: None,
        };
        let readings = [
            reading(0, Some(3), "GPU-3"),
            reading(1, Some(0), "GPU-0"),
            reading(2, None, "GPU-x"),
        ];
        let mut jobs = JobMap::default();
        jobs.by_minor.insert(
            0,
            JobRef {
                job_id_raw: 42,
                start: Some(100),
            },
        );
        let s = samples_at("n1", 20_000, 10_000, &readings, &jobs);
        assert_eq!(s[0].job_id_raw, None);
        assert_eq!((s[1].job_id_raw, s[1].job_start), (Some(42), Some(100)));
        assert_eq!(s[2].job_id_raw, None);
        assert!(s.iter().all(|x| x.ts_ms == 20_000 && x.check().is_ok()));
    }
}
