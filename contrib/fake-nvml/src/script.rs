//! The script a fake NVML replays: which GPUs this "node" has and their utilisation over time.
//!
//! ```text
//! # comment
//! epoch 1700000000                      # optional: what `+offset` times count from
//! gpu 3 uuid=GPU-0003 name="Fake H100" memory=81559 fail=utilization
//! util 3 +0 90 40000 35                 # minor, from, gpu %, [memory used MiB, [memory %]]
//! util 3 +60 2 100
//! proc 3 4242 1024                      # minor, pid, memory used MiB
//! ```
//!
//! - Devices get NVML indices in the order of their `gpu` lines, so a script listing minors
//!   3, 2, 1, 0 has index 0 = minor 3: a consumer that confuses the two is caught.
//! - Utilisation is piecewise constant: the last `util` line of the minor whose time has come;
//!   before the first one, 0 % and no memory used. Times are unix seconds, or `+seconds` from the
//!   epoch (fractions allowed); without an `epoch` line the epoch is the script's modification time.
//! - `fail=` lists calls that return NVML_ERROR_GPU_IS_LOST for that GPU: `uuid`, `minor`,
//!   `name`, `utilization`, `memory`, `processes`.
//! - `mig=on` or `mig=off`: the GPU supports MIG, in that mode (`nvmlDeviceGetMigMode`);
//!   without it, it does not (NVML_ERROR_NOT_SUPPORTED). With MIG on, its utilisation reads
//!   NVML_ERROR_NOT_SUPPORTED, as NVIDIA's NVML answers for a MIG-enabled GPU.

use std::collections::BTreeSet;
use std::fmt;

/// A call of the NVML API a script can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Call {
    Uuid,
    Minor,
    Name,
    Utilization,
    Memory,
    Processes,
}

impl Call {
    fn parse(s: &str) -> Option<Call> {
        Some(match s {
            "uuid" => Call::Uuid,
            "minor" => Call::Minor,
            "name" => Call::Name,
            "utilization" | "util" => Call::Utilization,
            "memory" => Call::Memory,
            "processes" => Call::Processes,
            _ => return None,
        })
    }
}

/// One step of a GPU's utilisation.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Unix seconds from which it holds.
    pub from: f64,
    pub gpu_percent: u32,
    pub mem_used_mib: u64,
    pub mem_percent: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    pub pid: u32,
    pub mem_used_mib: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    pub minor: u32,
    pub uuid: String,
    pub name: String,
    pub memory_mib: u64,
    pub fails: BTreeSet<Call>,
    /// Its MIG mode where it supports MIG (`mig=on|off`).
    pub mig: Option<bool>,
    /// Sorted by `from`; equal times keep file order (the later line wins).
    pub steps: Vec<Step>,
    pub processes: Vec<Process>,
}

impl Gpu {
    /// The utilisation step in force at `now` (unix seconds), if any.
    pub fn step_at(&self, now: f64) -> Option<&Step> {
        self.steps.iter().rev().find(|s| s.from <= now)
    }
}

/// A parsed script: the GPUs in NVML index order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Script {
    pub gpus: Vec<Gpu>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Split a line into words; `"..."` keeps spaces, `#` outside quotes starts a comment.
fn words(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            '#' if !quoted => break,
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quoted {
        return Err("unterminated quote".into());
    }
    if in_word {
        out.push(word);
    }
    Ok(out)
}

fn number<T: std::str::FromStr>(text: &str, what: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{what} `{text}` is not a number"))
}

fn percent(text: &str, what: &str) -> Result<u32, String> {
    let p: u32 = number(text, what)?;
    if p > 100 {
        return Err(format!("{what} {p} is above 100"));
    }
    Ok(p)
}

/// Parse `text`. `default_epoch` is what `+offset` counts from without an `epoch` line;
/// `devices`, when given, keeps only the GPUs with these minor numbers.
pub fn parse(
    text: &str,
    default_epoch: f64,
    devices: Option<&BTreeSet<u32>>,
) -> Result<Script, ScriptError> {
    let mut epoch = default_epoch;
    let mut gpus: Vec<Gpu> = Vec::new();
    // (line, minor, from-text, step) resolved once the epoch is known.
    let mut utils: Vec<(usize, u32, String, Step)> = Vec::new();
    let mut procs: Vec<(usize, u32, Process)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let err = |message: String| ScriptError { line, message };
        let w = words(raw).map_err(err)?;
        let Some(keyword) = w.first() else { continue };
        match keyword.as_str() {
            "epoch" => {
                let [_, t] = w.as_slice() else {
                    return Err(err("expected `epoch <unix seconds>`".into()));
                };
                epoch = number(t, "epoch").map_err(err)?;
            }
            "gpu" => {
                let gpu = gpu_line(&w, &gpus).map_err(err)?;
                gpus.push(gpu);
            }
            "util" => {
                let (minor, from, step) = util_line(&w).map_err(err)?;
                utils.push((line, minor, from, step));
            }
            "proc" => {
                let (minor, process) = proc_line(&w).map_err(err)?;
                procs.push((line, minor, process));
            }
            other => {
                return Err(err(format!(
                    "unknown keyword `{other}` (epoch, gpu, util, proc)"
                )))
            }
        }
    }
    place_steps(&mut gpus, utils, epoch)?;
    place_processes(&mut gpus, procs)?;
    for gpu in &mut gpus {
        // Stable: equal times keep file order, and step_at takes the last.
        gpu.steps.sort_by(|a, b| a.from.total_cmp(&b.from));
    }
    if let Some(keep) = devices {
        gpus.retain(|g| keep.contains(&g.minor));
    }
    Ok(Script { gpus })
}

/// A `gpu` line's GPU (`w`: its words), checked against the GPUs listed before it.
fn gpu_line(w: &[String], gpus: &[Gpu]) -> Result<Gpu, String> {
    let Some(minor) = w.get(1) else {
        return Err("expected `gpu <minor> uuid=GPU-...`".into());
    };
    let minor: u32 = number(minor, "minor number")?;
    let mut gpu = Gpu {
        minor,
        uuid: String::new(),
        name: "Fake GPU".into(),
        memory_mib: 81_920,
        fails: BTreeSet::new(),
        mig: None,
        steps: Vec::new(),
        processes: Vec::new(),
    };
    for attr in &w[2..] {
        let Some((key, value)) = attr.split_once('=') else {
            return Err(format!("`{attr}` is not key=value"));
        };
        match key {
            "uuid" => gpu.uuid = value.to_string(),
            "name" => gpu.name = value.to_string(),
            "memory" => gpu.memory_mib = number(value, "memory")?,
            "mig" => {
                gpu.mig = Some(match value {
                    "on" => true,
                    "off" => false,
                    _ => return Err(format!("mig={value}: write mig=on or mig=off")),
                });
            }
            "fail" => {
                for call in value.split(',').filter(|c| !c.is_empty()) {
                    let c = Call::parse(call).ok_or_else(|| {
                        format!("unknown call `{call}` in fail= (uuid, minor, name, utilization, memory, processes)")
                    })?;
                    gpu.fails.insert(c);
                }
            }
            _ => return Err(format!("unknown gpu attribute `{key}`")),
        }
    }
    if gpu.uuid.is_empty() {
        return Err(format!("gpu {minor} has no uuid="));
    }
    if gpus.iter().any(|g| g.minor == minor) {
        return Err(format!("gpu {minor} is listed twice"));
    }
    if gpus.iter().any(|g| g.uuid == gpu.uuid) {
        return Err(format!("uuid {} is listed twice", gpu.uuid));
    }
    Ok(gpu)
}

/// A `util` line's minor number, time as written, and step (its time still unresolved).
fn util_line(w: &[String]) -> Result<(u32, String, Step), String> {
    if !(4..=6).contains(&w.len()) {
        return Err(
            "expected `util <minor> <from> <gpu %> [<memory used MiB> [<memory %>]]`".into(),
        );
    }
    let minor: u32 = number(&w[1], "minor number")?;
    let step = Step {
        from: 0.0,
        gpu_percent: percent(&w[3], "gpu utilisation")?,
        mem_used_mib: match w.get(4) {
            Some(m) => number(m, "memory used")?,
            None => 0,
        },
        mem_percent: match w.get(5) {
            Some(m) => percent(m, "memory utilisation")?,
            None => 0,
        },
    };
    Ok((minor, w[2].clone(), step))
}

/// A `proc` line's minor number and process.
fn proc_line(w: &[String]) -> Result<(u32, Process), String> {
    let [_, minor, pid, mem] = w else {
        return Err("expected `proc <minor> <pid> <memory used MiB>`".into());
    };
    let minor: u32 = number(minor, "minor number")?;
    let process = Process {
        pid: number(pid, "pid")?,
        mem_used_mib: number(mem, "memory used")?,
    };
    Ok((minor, process))
}

/// Resolve each `util` line's time against `epoch` and give the step to its GPU.
fn place_steps(
    gpus: &mut [Gpu],
    utils: Vec<(usize, u32, String, Step)>,
    epoch: f64,
) -> Result<(), ScriptError> {
    for (line, minor, from, mut step) in utils {
        let err = |message: String| ScriptError { line, message };
        step.from = match from.strip_prefix('+') {
            Some(offset) => epoch + number::<f64>(offset, "time offset").map_err(err)?,
            None => number(&from, "time").map_err(err)?,
        };
        let gpu = gpus
            .iter_mut()
            .find(|g| g.minor == minor)
            .ok_or_else(|| err(format!("util for gpu {minor}, which has no gpu line")))?;
        if step.mem_used_mib > gpu.memory_mib {
            return Err(err(format!(
                "memory used {} MiB is more than gpu {minor}'s {} MiB",
                step.mem_used_mib, gpu.memory_mib
            )));
        }
        gpu.steps.push(step);
    }
    Ok(())
}

/// Give each `proc` line's process to its GPU.
fn place_processes(gpus: &mut [Gpu], procs: Vec<(usize, u32, Process)>) -> Result<(), ScriptError> {
    for (line, minor, process) in procs {
        let gpu = gpus
            .iter_mut()
            .find(|g| g.minor == minor)
            .ok_or_else(|| ScriptError {
                line,
                message: format!("proc for gpu {minor}, which has no gpu line"),
            })?;
        gpu.processes.push(process);
    }
    Ok(())
}

/// Read a `FAKE_NVML_DEVICES` value: minor numbers separated by commas.
pub fn parse_devices(text: &str) -> Result<BTreeSet<u32>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| number(s, "FAKE_NVML_DEVICES minor number"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = r#"
# two GPUs, listed with the higher minor first
epoch 1000
gpu 1 uuid=GPU-b name="Fake H100 80GB" memory=80000 fail=memory,processes
gpu 0 uuid=GPU-a mig=off
util 0 +0 50 100
util 0 +10.5 3 200 7
util 1 2000 90
proc 0 42 512
"#;

    #[test]
    fn a_script_gives_gpus_in_line_order_with_their_steps() {
        let s = parse(SCRIPT, 0.0, None).unwrap();
        let minors: Vec<u32> = s.gpus.iter().map(|g| g.minor).collect();
        assert_eq!(minors, [1, 0]);
        let b = &s.gpus[0];
        assert_eq!(b.name, "Fake H100 80GB");
        assert!(b.fails.contains(&Call::Memory) && b.fails.contains(&Call::Processes));
        let a = &s.gpus[1];
        assert_eq!((a.mig, b.mig), (Some(false), None));
        assert_eq!(a.step_at(999.0), None);
        assert_eq!(a.step_at(1000.0).unwrap().gpu_percent, 50);
        assert_eq!(a.step_at(1010.4).unwrap().gpu_percent, 50);
        let later = a.step_at(1010.5).unwrap();
        assert_eq!(
            (later.gpu_percent, later.mem_used_mib, later.mem_percent),
            (3, 200, 7)
        );
        assert_eq!(b.step_at(1999.0), None);
        assert_eq!(b.step_at(2000.0).unwrap().gpu_percent, 90);
        assert_eq!(
            a.processes,
            [Process {
                pid: 42,
                mem_used_mib: 512
            }]
        );
    }

    #[test]
    fn devices_keep_only_the_listed_minors() {
        let keep = parse_devices("0, 7").unwrap();
        let s = parse(SCRIPT, 0.0, Some(&keep)).unwrap();
        assert_eq!(s.gpus.len(), 1);
        assert_eq!(s.gpus[0].uuid, "GPU-a");
        assert!(parse_devices("0,x").is_err());
    }

    #[test]
    fn mistakes_name_their_line() {
        for (text, line, needle) in [
            ("gpu 0\n", 1, "no uuid"),
            ("gpu 0 uuid=a\nutil 0 +0 101\n", 2, "above 100"),
            ("gpu 0 uuid=a\nutil 1 +0 5\n", 2, "no gpu line"),
            ("\ngpu 0 uuid=a\ngpu 0 uuid=b\n", 3, "twice"),
            ("gpu 0 uuid=a fail=fan\n", 1, "unknown call"),
            ("gpu 0 uuid=a mig=yes\n", 1, "write mig=on or mig=off"),
            ("bogus\n", 1, "unknown keyword"),
            ("gpu 0 uuid=\"a\n", 1, "quote"),
            ("gpu 0 uuid=a memory=10\nutil 0 +0 5 11\n", 2, "more than"),
        ] {
            let e = parse(text, 0.0, None).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(needle), "{text:?}: {e}");
        }
    }
}
