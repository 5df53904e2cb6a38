//! The reader: an SWF file's text to its header and job records (the lines that cannot be read
//! skipped and counted), before any team mapping.

use std::collections::BTreeMap;

use super::{SwfError, SwfHeader, MALFORMED_LISTED};
use crate::parsable::MalformedLine;
use crate::replay::Secs;

/// What the reader makes of an SWF file's text.
pub(super) struct Read {
    pub(super) header: SwfHeader,
    /// The numeric header keys: value and line.
    pub(super) numeric: BTreeMap<&'static str, (i64, usize)>,
    pub(super) records: Vec<Record>,
    /// Job lines, read or not.
    pub(super) lines: usize,
    pub(super) malformed: usize,
    pub(super) malformed_first: Vec<MalformedLine>,
}

/// The header and job records of an SWF file's text; an error for a header that cannot be
/// read, or when no job line can be.
pub(super) fn read(text: &str) -> Result<Read, SwfError> {
    let mut header = SwfHeader::default();
    let mut numeric: BTreeMap<&'static str, (i64, usize)> = BTreeMap::new();
    let mut records: Vec<Record> = Vec::new();
    let mut malformed = 0;
    let mut malformed_first = Vec::new();
    let mut lines = 0;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix(';') {
            read_header(comment.trim(), line_no, &mut header, &mut numeric)?;
            continue;
        }
        lines += 1;
        match record(line_no, line) {
            Ok(r) => records.push(r),
            Err(reason) => {
                malformed += 1;
                if malformed_first.len() < MALFORMED_LISTED {
                    malformed_first.push(MalformedLine::new("SWF", line_no, reason, line));
                }
            }
        }
    }
    if records.is_empty() {
        return Err(SwfError::NoJobs {
            malformed,
            first: malformed_first.into_iter().next(),
        });
    }
    let get = |k: &str| numeric.get(k).map(|(v, _)| *v);
    header.unix_start_time = get("UnixStartTime");
    if let Some(t) = header.unix_start_time.filter(|t| *t > LAST_START) {
        return Err(SwfError::Header {
            line: numeric.get("UnixStartTime").map_or(0, |(_, l)| *l),
            reason: format!("UnixStartTime {t} is after the year 2200"),
            hint: "it is the epoch second of the log's time 0; fix or remove it".to_string(),
        });
    }
    header.max_procs = get("MaxProcs").and_then(|v| u64::try_from(v).ok());
    header.max_nodes = get("MaxNodes").and_then(|v| u64::try_from(v).ok());
    Ok(Read {
        header,
        numeric,
        records,
        lines,
        malformed,
        malformed_first,
    })
}

/// The fields of a job line, `None` for -1.
#[derive(Debug, Clone, Copy)]
pub(super) struct Record {
    pub(super) line: usize,
    pub(super) number: u64,
    pub(super) submit: Secs,
    pub(super) wait: Option<Secs>,
    pub(super) run: Option<Secs>,
    pub(super) alloc: Option<u64>,
    pub(super) req_procs: Option<u64>,
    pub(super) req_time: Option<Secs>,
    pub(super) status: Option<u64>,
    pub(super) user: Option<u64>,
    pub(super) group: Option<u64>,
    pub(super) queue: Option<u64>,
    pub(super) preceding: Option<u64>,
    pub(super) think: Option<Secs>,
}

/// One field: a number (decimals rounded), -1 → `None`, below -1 → an error.
fn field(text: &str, name: &str) -> Result<Option<i64>, String> {
    let v = match text.parse::<i64>() {
        Ok(v) => v,
        Err(_) => match text.parse::<f64>() {
            Ok(f) if f.is_finite() && f.abs() < 9.0e15 => f.round() as i64,
            _ => return Err(format!("{name} `{text}` is not a number")),
        },
    };
    match v {
        -1 => Ok(None),
        v if v < -1 => Err(format!("{name} `{text}` is negative (-1 is unknown)")),
        v => Ok(Some(v)),
    }
}

const FIELD_NAMES: [&str; 18] = [
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable",
    "queue",
    "partition",
    "preceding job",
    "think time",
];

fn record(line_no: usize, line: &str) -> Result<Record, String> {
    let parts: Vec<&str> = line.split_whitespace().collect();
    if parts.len() != 18 {
        return Err(format!(
            "expected 18 whitespace-separated fields, found {}",
            parts.len()
        ));
    }
    let mut v = [None; 18];
    for (i, p) in parts.iter().enumerate() {
        v[i] = field(p, FIELD_NAMES[i])?;
    }
    check_bounds(&v)?;
    // Non-negative by `field`.
    let id = |x: Option<i64>| x.map(|n| n.unsigned_abs());
    let number = id(v[0]).filter(|n| *n > 0).ok_or("job number unknown")?;
    let submit = v[1].ok_or("submit time unknown")?;
    Ok(Record {
        line: line_no,
        number,
        submit,
        wait: v[2],
        run: v[3],
        alloc: id(v[4]).filter(|n| *n > 0),
        req_procs: id(v[7]).filter(|n| *n > 0),
        req_time: v[8],
        status: id(v[10]),
        user: id(v[11]),
        group: id(v[12]),
        queue: id(v[14]),
        preceding: id(v[16]),
        think: v[17],
    })
}

/// The longest time a job line may give (submit, wait, run, requested and think times):
/// 50 years, longer than any machine of the archive has run. A larger value is a corrupt line,
/// and one such submit time would stretch the trace over millions of days.
pub const MAX_SECS: i64 = 50 * 366 * 86_400;
/// The most processors a job line may give: 100 million, ten times the largest machine
/// ever built.
pub const MAX_PROCS: i64 = 100_000_000;

/// The most GPUs a replayed cluster may have: well above the largest machines (about 10^5
/// GPUs), and small enough that its nodes fit in memory (a header's `MaxProcs: 4000000000`
/// would otherwise be half a billion node records).
pub const MAX_CLUSTER_GPUS: u32 = 1_000_000;

/// The latest `UnixStartTime` read: 2200-01-01 UTC.
const LAST_START: i64 = 7_258_118_400;

/// Values no real cluster has are refused, with the field's name and the bound.
fn check_bounds(v: &[Option<i64>; 18]) -> Result<(), String> {
    const TIMES: [usize; 5] = [1, 2, 3, 8, 17];
    const PROCS: [usize; 2] = [4, 7];
    for i in TIMES {
        if let Some(x) = v[i].filter(|x| *x > MAX_SECS) {
            return Err(format!(
                "{} {x} s is more than 50 years: not a real job's",
                FIELD_NAMES[i]
            ));
        }
    }
    for i in PROCS {
        if let Some(x) = v[i].filter(|x| *x > MAX_PROCS) {
            return Err(format!(
                "{} {x} is more than {MAX_PROCS}: no cluster has that many",
                FIELD_NAMES[i]
            ));
        }
    }
    Ok(())
}

/// The header keys read as numbers.
const NUMERIC_KEYS: [&str; 9] = [
    "UnixStartTime",
    "MaxNodes",
    "MaxProcs",
    "MaxJobs",
    "MaxRecords",
    "MaxRuntime",
    "MaxMemory",
    "MaxQueues",
    "MaxPartitions",
];

fn read_header(
    comment: &str,
    line: usize,
    header: &mut SwfHeader,
    numeric: &mut BTreeMap<&'static str, (i64, usize)>,
) -> Result<(), SwfError> {
    let Some((key, value)) = comment.split_once(':') else {
        return Ok(()); // free text
    };
    let key = key.trim();
    let value = value.trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Ok(()); // a sentence with a colon, not a `Key: value`
    }
    if let Some(&k) = NUMERIC_KEYS.iter().find(|k| k.eq_ignore_ascii_case(key)) {
        let v = value
            .split_whitespace()
            .next()
            .and_then(|w| w.parse::<i64>().ok())
            .filter(|v| *v >= 0);
        let Some(v) = v else {
            return Err(SwfError::Header {
                line,
                reason: format!("{k} `{value}` is not a number"),
                hint: format!("the header's `; {k}: N` must be a whole number; fix or remove it"),
            });
        };
        if let Some((prev, at)) = numeric.get(k) {
            if *prev != v {
                return Err(SwfError::Header {
                    line,
                    reason: format!("{k} {v} differs from line {at}'s {prev}"),
                    hint: "keep one of the two".to_string(),
                });
            }
        }
        numeric.insert(k, (v, line));
        return Ok(());
    }
    if key.eq_ignore_ascii_case("Version") {
        header.version = Some(value.to_string());
        return Ok(());
    }
    header
        .text
        .entry(key.to_string())
        .and_modify(|s| {
            s.push_str("; ");
            s.push_str(value);
        })
        .or_insert_with(|| value.to_string());
    Ok(())
}
