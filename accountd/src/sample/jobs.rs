//! Which Slurm job holds which GPU of this node (docs/design/gpu-to-job-mapping.md).
//!
//! Slurm's own device assignment, in three steps, none of them through NVML's index:
//! 1. `scontrol -d show job` prints, per job and node, `GRES=gpu:2(IDX:0-1)`: IDX are positions
//!    in the node's list of GPU devices;
//! 2. `slurmd -G -N <node>` prints that list as slurmd built it from gres.conf (its `File=`
//!    records in order; IDX counts over them), so IDX -> device file;
//! 3. the device file gives the minor number (`/dev/nvidia<minor>`, major 195), which NVML
//!    reports for each GPU (`nvmlDeviceGetMinorNumber`), so device -> UUID.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::period::{self, UnixSeconds};
use crate::slurm_cli::{SlurmCommand, SlurmCommandError};

/// The character-device major number of NVIDIA's GPU device files.
const NVIDIA_MAJOR: u64 = 195;

/// How long `scontrol` or `slurmd -G` may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// A job run as Slurm identifies it: JobIDRaw and StartTime (what `job_runs` is keyed by).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRef {
    pub job_id_raw: u32,
    /// UTC unix seconds; `None` when scontrol did not print a start.
    pub start: Option<UnixSeconds>,
}

/// The job holding each GPU of this node, by minor number. A GPU absent here is held by none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobMap {
    pub by_minor: BTreeMap<u32, JobRef>,
}

#[derive(Debug, thiserror::Error)]
pub enum JobLookupError {
    #[error(transparent)]
    Command(#[from] SlurmCommandError),
    #[error("`slurmd -G -N {node}` lists no GPU devices for this node (is {node} the Slurm node name? give --node)")]
    NoDevices { node: String },
    #[error("{what}: {message}")]
    Parse { what: String, message: String },
}

/// Where the Slurm texts come from: the commands on a node, recorded texts in tests.
pub trait SlurmView: Send {
    /// `scontrol -d show job` (every job, detailed).
    fn jobs_detail(&mut self) -> Result<String, JobLookupError>;
    /// `slurmd -G -N <node>` (slurmd's GRES devices of the node; it logs them on stderr).
    fn gres_devices(&mut self, node: &str) -> Result<String, JobLookupError>;
}

/// The real commands. Both need `SLURM_CONF`; `slurmd -G` only reads the configuration and
/// exits, it does not touch the running slurmd.
#[derive(Debug, Default)]
pub struct SlurmCommands;

impl SlurmView for SlurmCommands {
    fn jobs_detail(&mut self) -> Result<String, JobLookupError> {
        let cmd = SlurmCommand::new(
            "scontrol",
            vec!["-d".into(), "show".into(), "job".into()],
            COMMAND_TIMEOUT,
        );
        // With no jobs at all, scontrol says so and exits 0 ("No jobs in the system").
        Ok(cmd.run()?.stdout)
    }

    fn gres_devices(&mut self, node: &str) -> Result<String, JobLookupError> {
        let cmd = SlurmCommand::new(
            "slurmd",
            vec!["-G".into(), "-N".into(), node.into()],
            COMMAND_TIMEOUT,
        );
        let out = cmd.run()?;
        Ok(format!("{}{}", out.stderr, out.stdout))
    }
}

/// The GPU devices of a node in Slurm's IDX order: the device file of each, if it has one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GresDevices {
    pub files: Vec<Option<PathBuf>>,
}

/// Read `slurmd -G` output: lines like
/// `slurmd: Gres Name=gpu Type=(null) Count=4 Index=0 ID=7696487 File=/dev/nvidia[0-3] (null)`.
/// Only `Name=gpu` records count; their files expand in order (IDX 0, 1, ...).
pub fn parse_gres_devices(text: &str) -> Result<GresDevices, String> {
    let mut files = Vec::new();
    for line in text.lines() {
        let Some(at) = line.find("Gres Name=") else {
            continue;
        };
        let mut name = None;
        let mut count: Option<usize> = None;
        let mut file = None;
        for word in line[at + "Gres ".len()..].split_whitespace() {
            if let Some(v) = word.strip_prefix("Name=") {
                name = Some(v);
            } else if let Some(v) = word.strip_prefix("Count=") {
                count = v.parse().ok();
            } else if let Some(v) = word.strip_prefix("File=") {
                file = Some(v);
            }
        }
        if name != Some("gpu") {
            continue;
        }
        match file.filter(|f| *f != "(null)") {
            Some(f) => {
                let expanded = expand_hostlist(f).map_err(|e| format!("File={f}: {e}"))?;
                if let Some(n) = count.filter(|&n| n != expanded.len()) {
                    return Err(format!(
                        "File={f} names {} devices but Count={n}",
                        expanded.len()
                    ));
                }
                files.extend(expanded.into_iter().map(|p| Some(PathBuf::from(p))));
            }
            // A GPU without a device file still takes its place in the IDX order.
            None => files.extend(std::iter::repeat_n(None, count.unwrap_or(1))),
        }
    }
    Ok(GresDevices { files })
}

/// One job's GPUs on some nodes, as `scontrol -d show job` prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobGpus {
    pub job: JobRef,
    pub state: String,
    /// (node names, GPU IDX on each of them)
    pub allocations: Vec<(Vec<String>, Vec<u32>)>,
}

/// Read `scontrol -d show job` (TZ=UTC, SLURM_TIME_FORMAT=standard, as `SlurmCommand` runs it).
///
/// A record starts at a line beginning with `JobId=`; its GPUs are on the indented detail lines
/// `Nodes=<hostlist> CPU_IDs=.. Mem=.. GRES=gpu:2(IDX:0-1)`. Only line starts are trusted, so a
/// job name containing `Nodes=` cannot forge an allocation. Jobs without GPU IDX are left out.
pub fn parse_jobs_detail(text: &str) -> Result<Vec<JobGpus>, String> {
    let mut jobs: Vec<JobGpus> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = |message: String| format!("line {}: {message}", n + 1);
        if let Some(rest) = line.strip_prefix("JobId=") {
            let id = rest.split_whitespace().next().unwrap_or("");
            let job_id_raw: u32 = id
                .parse()
                .map_err(|_| at(format!("JobId `{id}` is not a number")))?;
            jobs.push(JobGpus {
                job: JobRef {
                    job_id_raw,
                    start: None,
                },
                state: String::new(),
                allocations: Vec::new(),
            });
            continue;
        }
        let Some(job) = jobs.last_mut() else { continue };
        let trimmed = line.trim_start();
        if trimmed.len() == line.len() {
            continue; // not a field line of the record
        }
        if let Some(rest) = trimmed.strip_prefix("JobState=") {
            job.state = rest.split_whitespace().next().unwrap_or("").to_string();
        } else if let Some(rest) = trimmed.strip_prefix("StartTime=") {
            let value = rest.split_whitespace().next().unwrap_or("");
            job.job.start = period::parse_local_datetime(value, &chrono::Utc).ok();
        } else if let Some(rest) = trimmed.strip_prefix("Nodes=") {
            let mut words = rest.split_whitespace();
            let nodes = words.next().unwrap_or("");
            let Some(gres) = words.find_map(|w| w.strip_prefix("GRES=")) else {
                continue;
            };
            let idx = gpu_indices(gres).map_err(|e| at(format!("GRES={gres}: {e}")))?;
            if idx.is_empty() {
                continue;
            }
            let nodes = expand_hostlist(nodes).map_err(|e| at(format!("Nodes={nodes}: {e}")))?;
            job.allocations.push((nodes, idx));
        }
    }
    jobs.retain(|j| !j.allocations.is_empty());
    Ok(jobs)
}

/// The GPU IDX of a detail line's GRES value: `gpu:2(IDX:0-1)`, `gpu:a100:1(IDX:3)`,
/// `gpu:2(IDX:0,2),gpu:h100:1(IDX:4)`; other GRES (`mps`, `shard`) are skipped.
fn gpu_indices(gres: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for item in split_top_level(gres, ',') {
        let name = item.split([':', '(']).next().unwrap_or("");
        if name != "gpu" {
            continue;
        }
        let Some(open) = item.find("(IDX:") else {
            continue;
        };
        let list = item[open + "(IDX:".len()..]
            .strip_suffix(')')
            .ok_or_else(|| format!("`{item}` has no closing parenthesis"))?;
        out.extend(number_list(list)?);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// `0-1,3` -> 0, 1, 3. `N/A` and the empty list are no indices.
fn number_list(list: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    if list == "N/A" {
        return Ok(out);
    }
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let parse = |s: &str| {
            s.parse::<u32>()
                .map_err(|_| format!("`{part}` is not an index range"))
        };
        let (a, b) = (parse(a)?, parse(b)?);
        if a > b || b - a > 65_536 {
            return Err(format!("`{part}` is not an index range"));
        }
        out.extend(a..=b);
    }
    Ok(out)
}

/// Split at `sep` outside parentheses and brackets.
fn split_top_level(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            c if c == sep && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// Expand a Slurm hostlist (`n[1-3,7],gpu01`, `/dev/nvidia[0-3]`), keeping zero padding
/// (`n[01-03]`), several brackets in one name (`r[1-2]n[1-2]`) included.
pub fn expand_hostlist(expr: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in split_top_level(expr, ',') {
        expand_one(part, &mut out)?;
        if out.len() > 1_000_000 {
            return Err("too many names".into());
        }
    }
    Ok(out)
}

fn expand_one(part: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = part.find('[') else {
        if part.contains(']') {
            return Err(format!("`{part}` has an unmatched `]`"));
        }
        out.push(part.to_string());
        return Ok(());
    };
    let close = part[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or_else(|| format!("`{part}` has an unmatched `[`"))?;
    let (prefix, ranges, suffix) = (&part[..open], &part[open + 1..close], &part[close + 1..]);
    let mut tails = Vec::new();
    expand_one(suffix, &mut tails)?;
    for range in ranges.split(',') {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let width = if a.len() > 1 && a.starts_with('0') {
            a.len()
        } else {
            0
        };
        let parse = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| format!("`{range}` in `{part}` is not a number range"))
        };
        let (lo, hi) = (parse(a)?, parse(b)?);
        if lo > hi || hi - lo > 100_000 {
            return Err(format!("`{range}` in `{part}` is not a number range"));
        }
        for n in lo..=hi {
            for tail in &tails {
                out.push(format!("{prefix}{n:0width$}{tail}"));
            }
        }
    }
    Ok(())
}

/// The minor number of a GPU device file: from the device number of a character device of
/// NVIDIA's major (195), else from the `nvidia<N>` file name, which is how the driver names its
/// device nodes (and how the dev cluster's stand-in files are named).
pub fn device_minor(path: &Path) -> Option<u32> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.file_type().is_char_device() {
            let (major, minor) = split_dev(meta.rdev());
            if major == NVIDIA_MAJOR {
                return u32::try_from(minor).ok();
            }
        }
    }
    let name = path.file_name()?.to_str()?;
    let digits = name.strip_prefix("nvidia")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Linux's encoding of a device number (glibc's gnu_dev_major/gnu_dev_minor).
fn split_dev(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

/// Build the map of one node from the parsed texts. `minor_of` resolves a device file
/// (tests give a table; the sampler [`device_minor`]). Returns the map and what did not fit.
pub fn build_job_map(
    node: &str,
    jobs: &[JobGpus],
    devices: &GresDevices,
    minor_of: &dyn Fn(&Path) -> Option<u32>,
) -> (JobMap, Vec<String>) {
    let mut map = JobMap::default();
    let mut problems = Vec::new();
    for job in jobs {
        for (nodes, idx) in &job.allocations {
            if !nodes.iter().any(|n| n == node) {
                continue;
            }
            for &i in idx {
                let file = devices.files.get(i as usize);
                let Some(Some(file)) = file else {
                    problems.push(format!(
                        "job {} holds GPU IDX {i} of {node}, which slurmd lists {}",
                        job.job.job_id_raw,
                        if file.is_none() {
                            "not at all"
                        } else {
                            "without a device file"
                        }
                    ));
                    continue;
                };
                let Some(minor) = minor_of(file) else {
                    problems.push(format!(
                        "job {} holds {}, whose minor number cannot be read",
                        job.job.job_id_raw,
                        file.display()
                    ));
                    continue;
                };
                if let Some(other) = map.by_minor.get(&minor) {
                    if other.job_id_raw != job.job.job_id_raw {
                        problems.push(format!(
                            "GPU minor {minor} of {node} is held by jobs {} and {}; counted for {}",
                            other.job_id_raw, job.job.job_id_raw, other.job_id_raw
                        ));
                    }
                    continue;
                }
                map.by_minor.insert(minor, job.job);
            }
        }
    }
    (map, problems)
}

/// Looks up the job map of one node, keeping slurmd's device list between lookups (it changes
/// only when slurmd restarts with a new gres.conf; an IDX beyond it makes it read again).
pub struct JobLookup {
    view: Box<dyn SlurmView>,
    node: String,
    devices: Option<GresDevices>,
}

impl JobLookup {
    pub fn new(view: Box<dyn SlurmView>, node: &str) -> Self {
        JobLookup {
            view,
            node: node.to_string(),
            devices: None,
        }
    }

    fn load_devices(&mut self) -> Result<GresDevices, JobLookupError> {
        let text = self.view.gres_devices(&self.node)?;
        let devices = parse_gres_devices(&text).map_err(|message| JobLookupError::Parse {
            what: format!("slurmd -G -N {}", self.node),
            message,
        })?;
        if devices.files.is_empty() {
            return Err(JobLookupError::NoDevices {
                node: self.node.clone(),
            });
        }
        Ok(devices)
    }

    /// The current map, and the problems met building it (to be logged).
    pub fn lookup(&mut self) -> Result<(JobMap, Vec<String>), JobLookupError> {
        let text = self.view.jobs_detail()?;
        let jobs = parse_jobs_detail(&text).map_err(|message| JobLookupError::Parse {
            what: "scontrol -d show job".into(),
            message,
        })?;
        let needed = jobs
            .iter()
            .flat_map(|j| &j.allocations)
            .filter(|(nodes, _)| nodes.contains(&self.node))
            .flat_map(|(_, idx)| idx.iter().copied())
            .max();
        let stale = match (&self.devices, needed) {
            (None, _) => true,
            (Some(d), Some(max)) => max as usize >= d.files.len(),
            (Some(_), None) => false,
        };
        if stale {
            self.devices = Some(self.load_devices()?);
        }
        let devices = self.devices.as_ref().expect("loaded above");
        Ok(build_job_map(&self.node, &jobs, devices, &device_minor))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Recorded on a Slurm 22.05.8 dev cluster (contrib/cluster) with n1's gres.conf listing its
    /// device files out of order: nvidia3, nvidia[0-1], nvidia2.
    pub(crate) const SHOW_JOB: &str = include_str!("testdata/scontrol-show-job-d.txt");
    pub(crate) const SLURMD_G_N1: &str = include_str!("testdata/slurmd-G-n1.txt");
    const SLURMD_G_N2: &str = include_str!("testdata/slurmd-G-n2.txt");

    fn by_name(path: &Path) -> Option<u32> {
        // The recorded files no longer exist: their names say the minor.
        device_minor(path)
    }

    #[test]
    fn hostlists_expand_like_slurm() {
        assert_eq!(expand_hostlist("n1").unwrap(), ["n1"]);
        assert_eq!(
            expand_hostlist("n[1-3],x").unwrap(),
            ["n1", "n2", "n3", "x"]
        );
        assert_eq!(
            expand_hostlist("gpu[08-10,12]").unwrap(),
            ["gpu08", "gpu09", "gpu10", "gpu12"]
        );
        assert_eq!(
            expand_hostlist("r[1-2]n[1-2]").unwrap(),
            ["r1n1", "r1n2", "r2n1", "r2n2"]
        );
        assert_eq!(
            expand_hostlist("/dev/nvidia[0-1]").unwrap(),
            ["/dev/nvidia0", "/dev/nvidia1"]
        );
        for bad in ["n[1-", "n[3-1]", "n[a-b]", "n]"] {
            assert!(expand_hostlist(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn gres_devices_follow_slurmds_order_not_the_file_numbers() {
        let d = parse_gres_devices(SLURMD_G_N1).unwrap();
        let names: Vec<String> = d
            .files
            .iter()
            .map(|f| {
                f.as_ref()
                    .unwrap()
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, ["nvidia3", "nvidia0", "nvidia1", "nvidia2"]);
        assert_eq!(parse_gres_devices(SLURMD_G_N2).unwrap().files.len(), 4);
        let err =
            parse_gres_devices("slurmd: Gres Name=gpu Count=3 File=/dev/nvidia[0-1]").unwrap_err();
        assert!(err.contains("Count=3"), "{err}");
        let other =
            parse_gres_devices("slurmd: Gres Name=mps Count=100 File=/dev/nvidia0").unwrap();
        assert!(other.files.is_empty());
    }

    #[test]
    fn the_recorded_jobs_are_read_with_their_gpus() {
        let jobs = parse_jobs_detail(SHOW_JOB).unwrap();
        let ids: Vec<u32> = jobs.iter().map(|j| j.job.job_id_raw).collect();
        // Cancelled jobs (3, 5) print `GRES=` without IDX; pending 10 has no detail line.
        assert_eq!(ids, [6, 7, 8, 9, 11]);
        let two_nodes = &jobs[3];
        assert_eq!(two_nodes.state, "RUNNING");
        assert_eq!(
            two_nodes.allocations,
            [
                (vec!["n1".to_string()], vec![3]),
                (vec!["n2".to_string()], vec![0])
            ]
        );
        // StartTime=2026-11-30T03:08:38, as scontrol prints it under TZ=UTC.
        assert_eq!(jobs[0].job.start, Some(1_796_008_118));
        let array_task = &jobs[4];
        assert_eq!(
            array_task.allocations,
            [(vec!["n2".to_string()], vec![1, 2])]
        );
    }

    #[test]
    fn idx_maps_to_minor_through_slurmds_device_list() {
        let jobs = parse_jobs_detail(SHOW_JOB).unwrap();
        let n1 = parse_gres_devices(SLURMD_G_N1).unwrap();
        let (map, problems) = build_job_map("n1", &jobs, &n1, &by_name);
        assert!(problems.is_empty(), "{problems:?}");
        let held: Vec<(u32, u32)> = map
            .by_minor
            .iter()
            .map(|(m, j)| (*m, j.job_id_raw))
            .collect();
        // IDX 0 -> nvidia3 (job 6), 1 -> nvidia0 (7), 2 -> nvidia1 (8), 3 -> nvidia2 (9).
        assert_eq!(held, [(0, 7), (1, 8), (2, 9), (3, 6)]);
        let n2 = parse_gres_devices(SLURMD_G_N2).unwrap();
        let (map, _) = build_job_map("n2", &jobs, &n2, &by_name);
        let held: Vec<(u32, u32)> = map
            .by_minor
            .iter()
            .map(|(m, j)| (*m, j.job_id_raw))
            .collect();
        assert_eq!(held, [(0, 9), (1, 11), (2, 11)]);
    }

    #[test]
    fn a_job_name_cannot_forge_an_allocation() {
        let text =
            "JobId=5 JobName=x Nodes=n1 GRES=gpu:8(IDX:0-7)\n   JobState=RUNNING Reason=None\n";
        assert!(parse_jobs_detail(text).unwrap().is_empty());
    }

    #[test]
    fn gres_values_of_several_kinds() {
        assert_eq!(gpu_indices("gpu:2(IDX:0-1)").unwrap(), [0, 1]);
        assert_eq!(gpu_indices("gpu:a100:1(IDX:3)").unwrap(), [3]);
        assert_eq!(
            gpu_indices("gpu:a100:2(IDX:0,2),gpu:h100:1(IDX:4),mps:100(0/100)").unwrap(),
            [0, 2, 4]
        );
        assert_eq!(gpu_indices("").unwrap(), Vec::<u32>::new());
        assert_eq!(gpu_indices("gpu:0(IDX:N/A)").unwrap(), Vec::<u32>::new());
        assert!(gpu_indices("gpu:1(IDX:x)").is_err());
    }

    #[test]
    fn an_idx_beyond_the_device_list_is_a_problem_not_a_guess() {
        let jobs = parse_jobs_detail(SHOW_JOB).unwrap();
        let short = GresDevices {
            files: vec![Some(PathBuf::from("/dev/nvidia0"))],
        };
        let (map, problems) = build_job_map("n1", &jobs, &short, &by_name);
        assert_eq!(map.by_minor.len(), 1);
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    #[test]
    fn device_minors_from_the_device_number_or_the_name() {
        assert_eq!(split_dev(0xc300), (195, 0));
        assert_eq!(split_dev((195 << 8) | 7), (195, 7));
        // /dev/null is c 1,3 and not named nvidia<N>.
        assert_eq!(device_minor(Path::new("/dev/null")), None);
        assert_eq!(device_minor(Path::new("/nonexistent/nvidia12")), Some(12));
        assert_eq!(device_minor(Path::new("/dev/nvidiactl")), None);
    }

    struct Recorded {
        calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl SlurmView for Recorded {
        fn jobs_detail(&mut self) -> Result<String, JobLookupError> {
            Ok(SHOW_JOB.to_string())
        }
        fn gres_devices(&mut self, _node: &str) -> Result<String, JobLookupError> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(SLURMD_G_N1.to_string())
        }
    }

    #[test]
    fn the_device_list_is_read_once() {
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut lookup = JobLookup::new(
            Box::new(Recorded {
                calls: calls.clone(),
            }),
            "n1",
        );
        for _ in 0..3 {
            let (map, _) = lookup.lookup().unwrap();
            assert_eq!(map.by_minor.len(), 4);
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
