//! Job arrays: how many tasks an array index names, and how to name them to scontrol.
//!
//! One parser for the plugin (`job_desc.array_inx` at submit, written by the user) and the
//! governor (squeue's ArrayTaskID of a pending record). Its grammar is slurmctld's own
//! (`_parse_array_tok` in job_mgr.c, 22.05): comma-separated `A`, `A-B` or `A-B:S`, then an
//! optional `%N`, with optional surrounding brackets.

/// A job array's tasks as squeue prints a pending record's (`1-9`, `1,3,5-9`, `0-30:3`) and
/// as sbatch's `--array` takes them, each with an optional `%N` throttle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayTasks {
    pub count: u64,
    pub throttle: Option<u32>,
    /// The tasks as scontrol takes them: ranges without steps (`_is_job_id` in scontrol
    /// refuses `:` and `%`). `None` when that list would be too long to send.
    pub ranges: Option<String>,
}

/// At most this many ranges in one task list the governor sends to scontrol.
const MAX_TASK_RANGES: usize = 4096;

/// `None` when `spec` is not one (a garbled value, or a count beyond 2^64).
pub fn parse_tasks(spec: &str) -> Option<ArrayTasks> {
    let spec = spec.trim().trim_start_matches('[').trim_end_matches(']');
    let (list, throttle) = match spec.split_once('%') {
        Some((l, t)) => (l, Some(t.parse::<u32>().ok()?)),
        None => (spec, None),
    };
    let mut count: u64 = 0;
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut too_long = false;
    for tok in list.split(',') {
        let (range, step) = match tok.split_once(':') {
            Some((r, s)) => (r, s.parse::<u64>().ok().filter(|s| *s > 0)?),
            None => (tok, 1),
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?),
            None => {
                let a = range.parse::<u64>().ok()?;
                (a, a)
            }
        };
        if b < a {
            return None;
        }
        let n = (b - a) / step + 1;
        count = count.checked_add(n)?;
        if step == 1 {
            ranges.push((a, b));
        } else if ranges.len() as u64 + n > MAX_TASK_RANGES as u64 {
            too_long = true;
        } else {
            ranges.extend((0..n).map(|i| (a + i * step, a + i * step)));
        }
        too_long |= ranges.len() > MAX_TASK_RANGES;
    }
    let ranges = (!too_long).then(|| {
        ranges
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    });
    Some(ArrayTasks {
        count,
        throttle,
        ranges,
    })
}

impl ArrayTasks {
    /// How many tasks may run at once: all of them, or the throttle (`%N`, 0 = no limit).
    pub fn concurrent(&self) -> u64 {
        match self.throttle {
            Some(n) if n > 0 => self.count.min(u64::from(n)),
            _ => self.count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tasks(spec: &str) -> (u64, Option<u32>, Option<String>) {
        let t = parse_tasks(spec).unwrap_or_else(|| panic!("{spec:?} not read"));
        (t.count, t.throttle, t.ranges)
    }

    #[test]
    fn every_form_slurm_takes_is_counted_and_named_without_steps() {
        assert_eq!(tasks("1-1000"), (1000, None, Some("1-1000".into())));
        assert_eq!(tasks("[4-9%2]"), (6, Some(2), Some("4-9".into())));
        assert_eq!(tasks("1,3,5-9"), (7, None, Some("1,3,5-9".into())));
        assert_eq!(tasks("0-12:4"), (4, None, Some("0,4,8,12".into())));
        assert_eq!(tasks("7"), (1, None, Some("7".into())));
        assert_eq!(tasks("0-30:3%5").1, Some(5));
        assert_eq!(parse_tasks("1-8%3").map(|t| t.concurrent()), Some(3));
        assert_eq!(parse_tasks("1-8%0").map(|t| t.concurrent()), Some(8));
    }

    #[test]
    fn what_slurm_would_refuse_is_not_read() {
        for bad in [
            "",
            "a",
            "5-1",
            "1-",
            "-3",
            "1-9:0",
            "1-9%x",
            "1,,2",
            "1-2-3",
            "18446744073709551616",
        ] {
            assert!(parse_tasks(bad).is_none(), "{bad:?} was read");
        }
    }

    #[test]
    fn a_list_too_long_to_send_is_counted_but_not_named() {
        let t = parse_tasks("0-999999:2").unwrap();
        assert_eq!((t.count, t.ranges), (500_000, None));
    }
}
