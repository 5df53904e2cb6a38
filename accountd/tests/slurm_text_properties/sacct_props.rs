//! sacct: what ingest reads.

use super::*;

/// A sacct record as the generator writes it, with the values it must be read as.
#[derive(Debug, Clone)]
pub(crate) struct SacctRecord {
    pub(crate) raw: u32,
    pub(crate) job_id: String,
    pub(crate) names: [String; 5],
    pub(crate) state: String,
    pub(crate) submit: Option<i64>,
    pub(crate) start: Option<i64>,
    /// After the start (or the submission of a job that never started).
    pub(crate) end_after: Option<i64>,
    pub(crate) elapsed: Option<i64>,
    /// `[D-]HH:MM:SS` (else `MM:SS` when under an hour).
    pub(crate) elapsed_long: bool,
    pub(crate) gpus: u64,
    pub(crate) gpu_type: Option<String>,
    pub(crate) eligible: Option<i64>,
    pub(crate) limit_minutes: Option<i64>,
    pub(crate) nnodes: Option<u32>,
    pub(crate) none_word: &'static str,
}

pub(crate) fn sacct_record() -> impl Strategy<Value = SacctRecord> {
    let job_id = prop_oneof![
        Just(None),
        (1u32..100_000, 0u32..1000).prop_map(|(a, t)| Some(format!("{a}_{t}"))),
        (1u32..100_000).prop_map(|a| Some(format!("{a}+0"))),
        (1u32..100_000).prop_map(|a| Some(format!("{a}_[1-100%4]"))),
    ];
    let state = prop_oneof![
        Just("COMPLETED".to_string()),
        Just("RUNNING".to_string()),
        Just("PENDING".to_string()),
        Just("PREEMPTED".to_string()),
        (0u32..100_000).prop_map(|u| format!("CANCELLED by {u}")),
        "[A-Z_]{1,16}",
    ];
    (
        (
            any::<u32>(),
            job_id,
            [name(), name(), name(), name(), name()],
            state,
        ),
        (
            prop::option::of(instant()),
            prop::option::of(instant()),
            prop::option::of(0i64..400 * 86_400),
            prop::option::of(0i64..1000 * 86_400),
            any::<bool>(),
        ),
        (0u64..10_000, gpu_type(), prop::option::of(instant())),
        (
            prop::option::of(0i64..10_000_000),
            prop::option::of(0u32..100_000),
            prop::sample::select(&["Unknown", "None", ""][..]),
        ),
    )
        .prop_map(
            |(
                (raw, job_id, names, state),
                (submit, start, end_after, elapsed, elapsed_long),
                (gpus, gpu_type, eligible),
                (limit_minutes, nnodes, none_word),
            )| SacctRecord {
                raw,
                job_id: job_id.unwrap_or_else(|| raw.to_string()),
                names,
                state,
                submit,
                start,
                end_after,
                elapsed,
                elapsed_long,
                gpus,
                gpu_type,
                eligible,
                limit_minutes,
                nnodes,
                none_word,
            },
        )
}

impl SacctRecord {
    pub(crate) fn end(&self) -> Option<i64> {
        let from = self.start.or(self.submit).unwrap_or(NOW);
        self.end_after.map(|d| from + d)
    }

    pub(crate) fn tres(&self) -> String {
        if self.gpus == 0 {
            return "billing=1,cpu=1,mem=1024M,node=1".to_string();
        }
        let typed = self
            .gpu_type
            .as_ref()
            .map_or(String::new(), |t| format!(",gres/gpu:{t}={}", self.gpus));
        format!("billing=1,cpu=4,gres/gpu={}{typed},node=1", self.gpus)
    }

    pub(crate) fn by_type(&self) -> BTreeMap<String, u64> {
        match &self.gpu_type {
            Some(t) if self.gpus > 0 => BTreeMap::from([(t.clone(), self.gpus)]),
            _ => BTreeMap::new(),
        }
    }

    /// The line as `sacct -P -n -o <FIELDS>` prints it, times in `tz`.
    pub(crate) fn line(&self, tz: &FixedOffset) -> String {
        let time = |t: Option<i64>| t.map_or(self.none_word.to_string(), |t| slurm_time(t, tz));
        let elapsed = self.elapsed.map_or("INVALID".to_string(), |e| {
            let (d, h, m, s) = (e / 86_400, e % 86_400 / 3600, e % 3600 / 60, e % 60);
            match (d, h) {
                (0, 0) if !self.elapsed_long => format!("{m:02}:{s:02}"),
                (0, _) => format!("{h:02}:{m:02}:{s:02}"),
                _ => format!("{d}-{h:02}:{m:02}:{s:02}"),
            }
        });
        let [cluster, account, user, partition, qos] = &self.names;
        let fields = [
            self.raw.to_string(),
            self.job_id.clone(),
            cluster.clone(),
            account.clone(),
            user.clone(),
            partition.clone(),
            qos.clone(),
            self.state.clone(),
            time(self.submit),
            time(self.start),
            time(self.end()),
            elapsed,
            if self.start.is_some() {
                self.tres()
            } else {
                String::new()
            },
            time(self.eligible),
            self.limit_minutes
                .map_or("UNLIMITED".to_string(), |m| m.to_string()),
            self.nnodes.map_or(String::new(), |n| n.to_string()),
            self.tres(),
        ];
        debug_assert_eq!(fields.len(), sacct::FIELDS.len());
        fields.join("|")
    }

    /// What sacct's reader must make of [`SacctRecord::line`].
    pub(crate) fn expected(&self) -> Want {
        let [cluster, account, user, partition, qos] = self.names.clone();
        let time_limit = self.limit_minutes.map(|m| m * 60);
        let Some(start) = self.start else {
            return Want::Unstarted(UnstartedJob {
                cluster,
                job_id_raw: self.raw,
                job_id: self.job_id.clone(),
                account,
                user,
                partition,
                qos,
                state: self.state.clone(),
                submit: self.submit,
                eligible: self.eligible,
                end: self.end(),
                gpus: self.gpus,
                gpus_by_type: self.by_type(),
                time_limit,
                nnodes: self.nnodes,
                req_tres: self.tres(),
            });
        };
        Want::Run(JobRun {
            cluster,
            job_id_raw: self.raw,
            job_id: self.job_id.clone(),
            account,
            user,
            partition,
            qos,
            state: self.state.clone(),
            submit: self.submit,
            start,
            end: self.end(),
            elapsed: self.elapsed,
            gpus: self.gpus,
            gpus_by_type: self.by_type(),
            alloc_tres: self.tres(),
            eligible: self.eligible,
            time_limit,
            nnodes: self.nnodes,
        })
    }
}

pub(crate) fn zone() -> impl Strategy<Value = FixedOffset> {
    (-14 * 4..=14 * 4i32).prop_map(|q| FixedOffset::east_opt(q * 900).unwrap())
}

/// What sacct's reader must make of a line.
#[derive(Debug)]
pub(crate) enum Want {
    Run(JobRun),
    Unstarted(UnstartedJob),
}

/// sacct's Elapsed field.
pub(crate) const ELAPSED: usize = 11;

/// `r`'s line with `field` replaced by `value` is read, or refused naming that field.
pub(crate) fn check_field_error(r: &SacctRecord, tz: &FixedOffset, field: usize, value: &str) {
    let line = r.line(tz);
    let mut f: Vec<&str> = line.split('|').collect();
    f[field] = value;
    let line = f.join("|");
    if let Err(e) = sacct::read_line(&line, tz) {
        let e = e.to_string();
        let words = if value.contains('|') {
            &["fields"][..]
        } else {
            sacct_field_words(field)
        };
        assert!(
            words.iter().any(|w| e.contains(w)),
            "field {field} ({}) = {value:?}: {e}",
            sacct::FIELDS[field],
        );
    }
}

/// Which words an error about field `i` of sacct's line must hold.
pub(crate) fn sacct_field_words(i: usize) -> &'static [&'static str] {
    match i {
        0 => &["JobIDRaw"],
        8 => &["Submit"],
        9 => &["Start", "End is before Start"],
        10 => &["End"],
        11 => &["Elapsed"],
        12 => &["AllocTRES"],
        13 => &["Eligible"],
        14 => &["TimelimitRaw"],
        15 => &["NNodes"],
        16 => &["ReqTRES"],
        _ => &[],
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// No text panics sacct's reader; every line is a run, a job that never started or a
    /// malformed line reported with its number and text.
    #[test]
    fn sacct_reads_any_text(text in soup(), tz in zone()) {
        let batch = sacct::parse(&text, &tz);
        let lines = non_blank(&text);
        prop_assert_eq!(batch.lines, lines.len());
        prop_assert_eq!(batch.runs.len() + batch.unstarted.len() + batch.malformed.len(), lines.len());
        prop_assert_eq!(batch.not_started, batch.unstarted.len());
        for m in &batch.malformed {
            prop_assert_eq!(m.command, sacct::COMMAND);
            assert_names_its_line(&text, m);
            prop_assert_eq!(
                &sacct::read_line(text.lines().nth(m.line_number - 1).unwrap(), &tz)
                    .unwrap_err()
                    .to_string(),
                &m.reason
            );
        }
    }

    /// A valid record with one field replaced by anything is read or refused, never a panic;
    /// a refusal names the field replaced (or the count of fields, for a value with `|`).
    /// Every field but Elapsed: see [`sacct_elapsed_errors_name_the_field`].
    #[test]
    fn sacct_errors_name_the_field(
        r in sacct_record(),
        tz in zone(),
        field in (0usize..16).prop_map(|f| if f >= ELAPSED { f + 1 } else { f }),
        value in junk_field(),
    ) {
        check_field_error(&r, &tz, field, &value);
    }

    /// [`sacct_errors_name_the_field`] for Elapsed (it found the overflow of
    /// `200000000000000000:0`, now malformed).
    #[test]
    fn sacct_elapsed_errors_name_the_field(
        r in sacct_record(),
        tz in zone(),
        value in junk_field(),
    ) {
        check_field_error(&r, &tz, ELAPSED, &value);
    }

    /// Records written from generated values read back as exactly those values, in any zone.
    #[test]
    fn sacct_reads_back_what_was_written(records in vec(sacct_record(), 0..8), tz in zone()) {
        let text: String = records.iter().map(|r| r.line(&tz) + "\n").collect();
        let batch = sacct::parse(&text, &tz);
        prop_assert!(batch.malformed.is_empty(), "{:?}", batch.malformed);
        let (mut runs, mut unstarted) = (Vec::new(), Vec::new());
        for r in &records {
            match r.expected() {
                Want::Run(run) => runs.push(run),
                Want::Unstarted(job) => unstarted.push(job),
            }
        }
        prop_assert_eq!(batch.runs, runs);
        prop_assert_eq!(batch.unstarted, unstarted);
        prop_assert_eq!(batch.lines, records.len());
        for r in &records {
            let line = r.line(&tz);
            let one = sacct::read_line(&line, &tz).unwrap();
            prop_assert_eq!(matches!(one, Record::Run(_)), r.start.is_some());
        }
    }

    /// One malformed line among valid ones (and blank lines anywhere) loses only itself.
    #[test]
    fn a_bad_sacct_line_loses_only_itself(
        records in vec(sacct_record(), 0..6),
        at in any::<prop::sample::Index>(),
        bad in prop_oneof![
            "[^\n\r]{1,40}".prop_filter("not blank", |s| !s.trim().is_empty()),
            vec("[^|\n\r]{0,6}", 18..20).prop_map(|f| f.join("|")),
        ],
        blanks in vec(any::<prop::sample::Index>(), 0..3),
    ) {
        let utc = FixedOffset::east_opt(0).unwrap();
        let mut lines: Vec<String> = records.iter().map(|r| r.line(&utc)).collect();
        let at = at.index(lines.len() + 1);
        lines.insert(at, bad);
        let mut bad_number = at + 1;
        for b in blanks {
            let i = b.index(lines.len() + 1);
            lines.insert(i, String::new());
            if i < bad_number {
                bad_number += 1;
            }
        }
        let text = lines.join("\n");
        let batch = sacct::parse(&text, &utc);
        let numbers: Vec<usize> = batch.malformed.iter().map(|m| m.line_number).collect();
        prop_assert_eq!(numbers, vec![bad_number]);
        assert_names_its_line(&text, &batch.malformed[0]);
        prop_assert_eq!(batch.runs.len() + batch.unstarted.len(), records.len());
        let want: Vec<JobRun> = records
            .iter()
            .filter_map(|r| match r.expected() {
                Want::Run(run) => Some(run),
                Want::Unstarted(_) => None,
            })
            .collect();
        prop_assert_eq!(batch.runs, want);
    }
}

/// Bytes of sacct output: valid records, junk lines and lines that are not UTF-8.
pub(crate) fn sacct_bytes() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let utc = FixedOffset::east_opt(0).unwrap();
    let line = prop_oneof![
        3 => sacct_record().prop_map(move |r| r.line(&utc).into_bytes()),
        1 => junk_field().prop_map(String::into_bytes),
        1 => (sacct_record(), vec(any::<u8>(), 1..4), any::<prop::sample::Index>()).prop_map(
            move |(r, bytes, at)| {
                let mut line = r.line(&utc).into_bytes();
                let at = at.index(line.len() + 1);
                line.splice(at..at, bytes.into_iter().map(|b| b | 0x80));
                line
            }
        ),
        1 => vec(any::<u8>().prop_filter("one line", |b| *b != b'\n'), 0..40),
    ]
    // A line's own `\r` at its end would be taken for half of a `\r\n`.
    .prop_map(|mut line: Vec<u8>| {
        while line.last() == Some(&b'\r') {
            line.pop();
        }
        line
    });
    vec(line, 0..10)
}

proptest! {
    #![proptest_config(config(64))]

    /// Ingest reads sacct's output as bytes: a line that is not UTF-8 is one malformed line
    /// (named by its number), every other line is read as `sacct::read_line` reads it, and the
    /// valid runs are all stored.
    #[test]
    fn ingest_reads_any_bytes(lines in sacct_bytes(), crlf in any::<bool>()) {
        let utc = FixedOffset::east_opt(0).unwrap();
        let mut out = Vec::new();
        for l in &lines {
            out.extend_from_slice(l);
            out.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
        }
        let mut store = Store::open_in_memory().unwrap();
        let plan = ingest::plan(&store, "c", Some(0), Some(NOW), NOW).unwrap();
        let summary =
            ingest::store_reader(&mut store, &plan, &mut &out[..], &utc, NOW, &mut |_| {}).unwrap();
        let mut want_malformed = Vec::new();
        let mut read = 0;
        let mut runs = std::collections::BTreeSet::new();
        for (i, bytes) in lines.iter().enumerate() {
            let text = std::str::from_utf8(bytes);
            if text.is_ok_and(|t| t.trim().is_empty()) {
                continue;
            }
            read += 1;
            match text {
                Err(_) => want_malformed.push((i + 1, "the line is not UTF-8".to_string())),
                Ok(t) => match sacct::read_line(t, &utc) {
                    Err(e) => want_malformed.push((i + 1, e.to_string())),
                    Ok(Record::Run(r)) => {
                        runs.insert((r.job_id_raw, r.start));
                    }
                    Ok(Record::Unstarted(_)) => {}
                },
            }
        }
        prop_assert_eq!(summary.read, read);
        let got: Vec<(usize, String)> = summary
            .malformed
            .iter()
            .map(|m| (m.line_number, m.reason.clone()))
            .collect();
        prop_assert_eq!(got, want_malformed);
        prop_assert_eq!(summary.stored.inserted, runs.len());
    }
}
