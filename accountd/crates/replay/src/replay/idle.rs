//! GPUs idle while admitted work waits: what a candidate leaves on the table.
//!
//! An instant counts when at least one admitted job waits (eligible, not started or
//! requeued and not started again, not cancelled, before the trace's end) and the smallest
//! waiting job needs no more GPUs than the cluster has idle (capacity minus the GPUs of running
//! runs): every idle GPU of that instant is counted. That is the utilisation harness's "IWW"
//! with a fit by count rather than by node (the outcome does not say where runs ran), so it
//! is an upper bound of what a better placement could have used; on a plain, full queue it is
//! near zero, and a candidate that starves admitted jobs beside idle GPUs shows it at once.

use std::collections::BTreeMap;

use super::{Outcome, Secs, Trace};

/// Event kinds at one instant, applied in this order: capacity, runs ending, waits ending,
/// runs starting, waits starting (so that a job requeued and started again at the same
/// instant is never counted both waiting and running).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Capacity,
    RunEnd,
    WaitEnd,
    RunStart,
    WaitStart,
}

/// GPU-seconds idle while an admitted job that fits them by count waited (see the module).
pub fn idle_while_waiting_gpu_secs(trace: &Trace, outcome: &Outcome) -> i64 {
    let mut events: Vec<(Secs, Kind, u32)> = Vec::new();
    for &(at, gpus) in &outcome.capacity {
        events.push((at.max(trace.since), Kind::Capacity, gpus));
    }
    for o in outcome
        .jobs
        .iter()
        .filter(|o| !o.rejected && !o.wait_unknown)
    {
        let Some(job) = trace.jobs.get(o.job) else {
            continue;
        };
        // Waiting from eligibility to the first start, and between a preempted run's end
        // and the next start; the last wait (never started again) to the cancellation or
        // the trace's end.
        let mut from = job.eligible;
        for r in &o.runs {
            push_wait(&mut events, from, r.start, job.gpus);
            events.push((r.start, Kind::RunStart, job.gpus));
            events.push((r.end.max(r.start), Kind::RunEnd, job.gpus));
            from = if r.preempted { r.end } else { Secs::MAX };
        }
        if from != Secs::MAX {
            let until = if o.cancelled {
                job.cancelled_pending_at.unwrap_or(trace.until)
            } else {
                trace.until
            };
            push_wait(&mut events, from, until.min(trace.until), job.gpus);
        }
    }
    events.sort_unstable();
    let mut capacity: i64 = 0;
    let mut used: i64 = 0;
    let mut waiting: BTreeMap<u32, u32> = BTreeMap::new();
    let mut total: i64 = 0;
    let mut last = trace.since;
    for (at, kind, gpus) in events {
        let at = at.clamp(trace.since, trace.until);
        let idle = capacity - used;
        if at > last && idle > 0 {
            if let Some((&smallest, _)) = waiting.iter().next() {
                if i64::from(smallest) <= idle {
                    total += idle * (at - last);
                }
            }
        }
        last = at;
        match kind {
            Kind::Capacity => capacity = i64::from(gpus),
            Kind::RunStart => used += i64::from(gpus),
            Kind::RunEnd => used -= i64::from(gpus),
            Kind::WaitStart => *waiting.entry(gpus).or_default() += 1,
            Kind::WaitEnd => {
                if let Some(n) = waiting.get_mut(&gpus) {
                    *n -= 1;
                    if *n == 0 {
                        waiting.remove(&gpus);
                    }
                }
            }
        }
    }
    total
}

fn push_wait(events: &mut Vec<(Secs, Kind, u32)>, from: Secs, to: Secs, gpus: u32) {
    if to > from {
        events.push((from, Kind::WaitStart, gpus));
        events.push((to, Kind::WaitEnd, gpus));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::metrics::run;
    use crate::replay::metrics::tests::{job, H, T0};
    use crate::replay::{Cluster, JobOutcome, NodeSpec};

    fn trace(jobs: Vec<crate::replay::TraceJob>) -> Trace {
        Trace {
            jobs,
            cluster: Cluster {
                nodes: vec![NodeSpec {
                    name: "n1".into(),
                    gpus: 4,
                    gpu_type: None,
                }],
                drains: Vec::new(),
            },
            since: T0,
            until: T0 + 10 * H,
            source: "test".into(),
            activity: None,
        }
    }

    fn outcome(jobs: Vec<JobOutcome>) -> Outcome {
        Outcome {
            jobs,
            passes: 0,
            capacity: vec![(T0, 4)],
        }
    }

    fn ran(job: usize, runs: Vec<crate::replay::SimRun>) -> JobOutcome {
        JobOutcome {
            job,
            runs,
            ..JobOutcome::default()
        }
    }

    #[test]
    fn idle_gpus_count_only_while_a_waiting_job_fits_them() {
        // 4 GPUs. Job 0 (2 GPUs) runs [T0, T0+4h). Job 1 (1 GPU, eligible T0) waits until
        // T0+1h: 2 GPUs idle for 1 h while it fits = 2 GPU-h. Job 2 (4 GPUs, eligible T0+2h)
        // never starts: from T0+2h job 1 runs (1 GPU), 1 GPU idle but the 4-GPU job does not
        // fit until job 0 ends at T0+4h; then 3 idle GPUs... job 1 ends at T0+5h: 4 idle and
        // it fits: counted from T0+5h to the end (T0+10h) = 4 x 5 h = 20 GPU-h. From T0+4h to
        // T0+5h 3 GPUs are idle and the only waiting job needs 4: nothing.
        let t = trace(vec![
            job(0, "a", T0, 2),
            job(1, "b", T0, 1),
            job(2, "b", T0 + 2 * H, 4),
        ]);
        let o = outcome(vec![
            ran(0, vec![run(T0, T0 + 4 * H, false, false)]),
            ran(1, vec![run(T0 + H, T0 + 5 * H, false, false)]),
            ran(2, Vec::new()),
        ]);
        assert_eq!(idle_while_waiting_gpu_secs(&t, &o), (2 + 20) * H);
        // Rejected and cancelled jobs do not wait: job 2 cancelled at T0+6h counts 4 x 1 h.
        let mut t2 = t.clone();
        t2.jobs[2].cancelled_pending_at = Some(T0 + 6 * H);
        let mut o2 = o.clone();
        o2.jobs[2].cancelled = true;
        assert_eq!(idle_while_waiting_gpu_secs(&t2, &o2), (2 + 4) * H);
        o2.jobs[2].rejected = true;
        assert_eq!(idle_while_waiting_gpu_secs(&t2, &o2), 2 * H);
    }

    #[test]
    fn a_preempted_job_waits_again_until_its_next_start() {
        // Job 0 (4 GPUs) runs [T0, T0+1h), is preempted, runs again [T0+3h, T0+4h): between,
        // 4 GPUs idle for 2 h while it waits = 8 GPU-h; after T0+4h nobody waits.
        let t = trace(vec![job(0, "a", T0, 4)]);
        let o = outcome(vec![ran(
            0,
            vec![
                run(T0, T0 + H, true, false),
                run(T0 + 3 * H, T0 + 4 * H, false, false),
            ],
        )]);
        assert_eq!(idle_while_waiting_gpu_secs(&t, &o), 8 * H);
    }
}
