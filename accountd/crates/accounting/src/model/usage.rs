//! The in-quota / borrowed / lent split of GPU usage over a period (DESIGN §5).
//!
//! The GPUs each team holds are a step function of time: they change only where a run starts or
//! ends. Between two consecutive events (run starts and ends, capacity changes, period and day
//! bounds) everything is constant, so the split is computed once per such interval and
//! multiplied by its length. At every instant, for team T with quota Q_T, lend limit L_T and U_T
//! GPUs held:
//! - in-quota: min(U_T, Q_T); borrowed: max(0, U_T - Q_T); B is the sum of borrowed GPUs;
//! - T's lendable idle quota: idle_T = min(L_T, max(0, Q_T - U_T));
//! - the unallocated pool: max(0, C - sum of Q);
//! - B is attributed to the lenders pro rata: team T gets B x idle_T / lendable and `(pool)`
//!   B x pool / lendable, with lendable = sum of idle_T + pool.
//!
//! Governance keeps B within what is lendable (DESIGN §4 rule 4). When it is not (a capacity drop
//! under running borrowed jobs, history from before a quota change), each lender is charged its
//! whole lendable idle quota and the excess goes to `(pool)`, counted apart in `over_lendable`,
//! so that the sum of lent always equals the sum of borrowed.
//!
//! The split knows nothing of GPU types: where quotas are typed, the caller splits each type
//! apart, with that type's runs, quotas and capacity ([`TeamQuota::typed_from_config`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, FixedOffset, NaiveDate};
use teamshare_config::{Config, DEFAULT_GPU_TYPE};

use crate::period::{Period, UnixSeconds};

/// The row that stands for the unallocated capacity (C - sum of quotas) as a lender.
pub const POOL: &str = "(pool)";

/// A capacity step: from this instant on (until the next step), the governed capacity is this
/// many GPUs.
pub type CapacityStep = (UnixSeconds, u32);

const SECONDS_PER_DAY: i64 = 86_400;

/// A job run holding `gpus` GPUs over `[start, end)`. For a running job the caller passes `now`
/// as the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The Slurm account (shared between the runs of one account).
    pub team: Arc<str>,
    pub gpus: u32,
    pub start: UnixSeconds,
    pub end: UnixSeconds,
}

/// What the split needs to know of a team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamQuota {
    pub name: String,
    /// Guaranteed GPUs, Q_T.
    pub quota: u32,
    /// GPUs of the team's idle quota that others may use, L_T (more than `quota` counts as
    /// `quota`).
    pub lend_limit: u32,
}

impl TeamQuota {
    /// Every team of the configuration with its total quota, in file order.
    pub fn all_from_config(config: &Config) -> Vec<TeamQuota> {
        config
            .teams
            .iter()
            .map(|team| TeamQuota {
                name: team.name.clone(),
                quota: team.quota.total,
                lend_limit: team.lend_limit,
            })
            .collect()
    }

    /// Every team of the configuration with its quota Q_{T,k} and lend limit L_{T,k} of
    /// `gpu_type`, in file order (a team without quota of that type has 0 of both).
    pub fn of_type_from_config(config: &Config, gpu_type: &str) -> Vec<TeamQuota> {
        config
            .teams
            .iter()
            .map(|team| TeamQuota {
                name: team.name.clone(),
                quota: team.quota_of(gpu_type),
                lend_limit: team.lend_limit_of(gpu_type),
            })
            .collect()
    }

    /// A typed configuration ([`Config::is_typed`]): [`TeamQuota::of_type_from_config`] for
    /// every governed GPU type. An untyped configuration gives an empty map: its split is on
    /// total quotas. GPUs without a type (the `default` key) have no quota in a typed
    /// configuration, and so are not in the map.
    pub fn typed_from_config(config: &Config) -> BTreeMap<String, Vec<TeamQuota>> {
        if !config.is_typed() {
            return BTreeMap::new();
        }
        config
            .governed_types()
            .into_iter()
            .filter(|t| *t != DEFAULT_GPU_TYPE)
            .map(|t| (t.to_string(), TeamQuota::of_type_from_config(config, t)))
            .collect()
    }
}

/// The most GPUs `runs` held at once within `period` (runs clipped to it); 0 for none.
pub fn peak_gpus(runs: &[Run], period: Period) -> u64 {
    let mut changes: Vec<(UnixSeconds, i64)> = Vec::with_capacity(2 * runs.len());
    for run in runs {
        let (start, end) = (run.start.max(period.since), run.end.min(period.until));
        if start < end && run.gpus > 0 {
            changes.push((start, i64::from(run.gpus)));
            changes.push((end, -i64::from(run.gpus)));
        }
    }
    // At one instant, ends before starts: a run that ends where another starts never overlaps it.
    changes.sort_unstable();
    let (mut held, mut peak) = (0i64, 0i64);
    for (_, delta) in changes {
        held += delta;
        peak = peak.max(held);
    }
    peak.max(0) as u64
}

/// One row of the split, in GPU-seconds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TeamSplit {
    pub team: String,
    /// The guaranteed quota over the period: Q_T x length. For `(pool)`: the unallocated
    /// capacity max(0, C - sum of Q) integrated over the period.
    pub quota: f64,
    /// Sum of g x overlap over the team's runs. Zero for `(pool)`.
    pub allocated: f64,
    pub in_quota: f64,
    pub borrowed: f64,
    /// The part of other teams' borrowed usage that ran on this row's idle quota (for `(pool)`:
    /// on unallocated capacity, plus whatever exceeded what was lendable).
    pub lent: f64,
}

/// Sums over all rows, in GPU-seconds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SplitTotals {
    /// The governed capacity C integrated over the period.
    pub capacity: f64,
    /// max(0, C - sum of Q) integrated over the period (the `(pool)` row's `quota`).
    pub unallocated: f64,
    pub allocated: f64,
    pub in_quota: f64,
    pub borrowed: f64,
    /// Including `(pool)`; equals `borrowed` up to rounding.
    pub lent: f64,
    /// Borrowed GPU-seconds beyond what was lendable at the time, charged to `(pool)`; zero when
    /// governance held.
    pub over_lendable: f64,
}

/// The split of one period.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageSplit {
    pub period: Period,
    /// One row per team given (with or without usage) and per other account with usage in the
    /// period (such an account has no quota: all its usage is borrowed), ordered by name; then
    /// the `(pool)` row.
    pub rows: Vec<TeamSplit>,
    pub totals: SplitTotals,
}

impl UsageSplit {
    /// The row of `team` (or of [`POOL`]).
    pub fn row(&self, team: &str) -> Option<&TeamSplit> {
        self.rows.iter().find(|row| row.team == team)
    }
}

/// The split of one day.
#[derive(Debug, Clone, PartialEq)]
pub struct DaySplit {
    /// The local date at the offset given.
    pub date: NaiveDate,
    /// The part of the period inside that day; `split.period` is the day clipped to the period.
    pub split: UsageSplit,
}

/// The in-quota / borrowed / lent split of `runs` over `period`.
///
/// `capacity` is a step function: sorted or not, each step holds from its instant until the next
/// one; before the first step the first step's capacity holds, so a constant capacity is one step
/// whatever its instant. No steps: no capacity (C = 0). A reversed period counts as empty.
pub fn split_usage(
    runs: &[Run],
    teams: &[TeamQuota],
    capacity: &[CapacityStep],
    period: Period,
) -> UsageSplit {
    let until = period.until.max(period.since);
    sweep(runs, teams, capacity, &[period.since, until])
        .pop()
        .expect("two bounds make one bucket")
}

/// [`split_usage`] day by day: one entry per local day (at the UTC offset `offset`) that meets
/// the period, in order. Each day's split is the one of the period clipped to that day, so the days
/// add up to the whole period. An empty period has no days. Dates out of chrono's range (beyond
/// ±262,000 years) saturate.
pub fn split_usage_by_day(
    runs: &[Run],
    teams: &[TeamQuota],
    capacity: &[CapacityStep],
    period: Period,
    offset: FixedOffset,
) -> Vec<DaySplit> {
    if period.since >= period.until {
        return Vec::new();
    }
    let offset_secs = i64::from(offset.local_minus_utc());
    let mut bounds = vec![period.since];
    let since_local = period.since.saturating_add(offset_secs);
    let mut midnight = since_local - since_local.rem_euclid(SECONDS_PER_DAY) - offset_secs;
    loop {
        midnight = midnight.saturating_add(SECONDS_PER_DAY);
        if midnight >= period.until {
            break;
        }
        bounds.push(midnight);
    }
    bounds.push(period.until);

    sweep(runs, teams, capacity, &bounds)
        .into_iter()
        .map(|split| {
            let local = split.period.since.saturating_add(offset_secs);
            let date = DateTime::from_timestamp(local, 0).map_or(
                if local < 0 {
                    NaiveDate::MIN
                } else {
                    NaiveDate::MAX
                },
                |t| t.date_naive(),
            );
            DaySplit { date, split }
        })
        .collect()
}

/// A row being summed up. Integral quantities stay integers so that allocated = in-quota +
/// borrowed holds exactly; only the pro rata lent part is fractional.
#[derive(Debug, Clone, Default)]
struct Sums {
    quota: i128,
    allocated: i128,
    in_quota: i128,
    borrowed: i128,
    lent: f64,
}

#[derive(Debug, Clone)]
struct Bucket {
    /// The teams' rows in `Lender` order, then `(pool)`.
    rows: Vec<Sums>,
    capacity: i128,
    over_lendable: f64,
}

#[derive(Debug, Clone)]
struct Lender {
    name: String,
    quota: u64,
    lend_limit: u64,
}

/// A usage change: (instant, row or account slot, GPUs added or removed).
type Change = (UnixSeconds, usize, i64);

/// Sweep the timeline from `bounds[0]` to the last bound, summing into one bucket per
/// consecutive pair of bounds (sorted, at least two).
fn sweep(
    runs: &[Run],
    teams: &[TeamQuota],
    capacity: &[CapacityStep],
    bounds: &[UnixSeconds],
) -> Vec<UsageSplit> {
    let (first, last) = (bounds[0], bounds[bounds.len() - 1]);
    let (lenders, changes) = lenders_and_changes(runs, teams, first, last);
    let pool_row = lenders.len();
    let total_quota: u64 = lenders.iter().map(|l| l.quota).sum();
    let mut steps = capacity.to_vec();
    steps.sort_by_key(|&(from, _)| from); // stable: of two steps at one instant the later wins
    let fixed = fixed_instants(bounds, &steps);

    let mut buckets = vec![
        Bucket {
            rows: vec![Sums::default(); pool_row + 1],
            capacity: 0,
            over_lendable: 0.0,
        };
        bounds.len() - 1
    ];
    let mut held = vec![0i64; pool_row];
    let mut idle = vec![0u64; pool_row];
    let (mut next_change, mut next_step, mut next_fixed, mut bucket) = (0, 0, 0, 0);
    let mut gpus_capacity = steps.first().map_or(0, |&(_, gpus)| gpus);

    let mut t0 = first;
    while t0 < last {
        while next_change < changes.len() && changes[next_change].0 <= t0 {
            let (_, row, delta) = changes[next_change];
            held[row] += delta;
            next_change += 1;
        }
        while next_fixed < fixed.len() && fixed[next_fixed] <= t0 {
            next_fixed += 1;
        }
        // Every change is within [first, last] and `last` is the last fixed instant.
        let t1 = match changes.get(next_change) {
            Some(&(t, _, _)) => t.min(fixed[next_fixed]),
            None => fixed[next_fixed],
        };
        while next_step < steps.len() && steps[next_step].0 <= t0 {
            gpus_capacity = steps[next_step].1;
            next_step += 1;
        }
        while bounds[bucket + 1] <= t0 {
            bucket += 1;
        }
        let interval = Interval {
            dt: i128::from(t1 - t0),
            capacity: gpus_capacity,
            total_quota,
        };
        t0 = t1;
        count_interval(&mut buckets[bucket], &lenders, &held, &mut idle, interval);
    }

    buckets
        .into_iter()
        .zip(bounds.windows(2))
        .map(|(sums, window)| {
            let period = Period {
                since: window[0],
                until: window[1],
            };
            finish(period, &lenders, sums)
        })
        .collect()
}

/// The rows of the split and the usage changes of `runs` clipped to `[first, last]`, each
/// change on its row and in order of instant.
fn lenders_and_changes(
    runs: &[Run],
    teams: &[TeamQuota],
    first: UnixSeconds,
    last: UnixSeconds,
) -> (Vec<Lender>, Vec<Change>) {
    let clipped = runs
        .iter()
        .map(|run| (run, run.start.max(first), run.end.min(last)))
        .filter(|&(run, start, end)| start < end && run.gpus > 0);

    // The rows: every team given (the first of a repeated name wins), then every other account
    // with usage, with no quota; ordered by name. Runs come with few distinct accounts, often
    // the same one over and over: the last one's row is tried first.
    let mut by_name: BTreeMap<&str, Lender> = BTreeMap::new();
    for team in teams {
        by_name.entry(&team.name).or_insert_with(|| Lender {
            name: team.name.clone(),
            quota: u64::from(team.quota),
            lend_limit: u64::from(team.lend_limit.min(team.quota)),
        });
    }
    // Usage changes on account slots; slots become rows below. Starts and ends apart: runs
    // mostly come in order of start (a report reads them by start time), which a stable sort
    // merely checks, so only the ends need a full sort.
    let mut slots: Vec<&str> = Vec::new();
    let mut starts: Vec<Change> = Vec::with_capacity(runs.len());
    let mut ends: Vec<Change> = Vec::with_capacity(runs.len());
    let mut last_slot = usize::MAX;
    for (run, start, end) in clipped {
        let team: &str = &run.team;
        let slot = super::find_or_push(
            &mut slots,
            &mut last_slot,
            |&s| super::same_str(s, team),
            || team,
        );
        starts.push((start, slot, i64::from(run.gpus)));
        ends.push((end, slot, -i64::from(run.gpus)));
    }
    for &team in &slots {
        by_name.entry(team).or_insert_with(|| Lender {
            name: team.to_string(),
            quota: 0,
            lend_limit: 0,
        });
    }
    let index: BTreeMap<&str, usize> = by_name.keys().enumerate().map(|(i, &n)| (n, i)).collect();
    let row_of_slot: Vec<usize> = slots.iter().map(|&s| index[s]).collect();
    let lenders: Vec<Lender> = by_name.into_values().collect();
    // Only the order of instants matters: every change at one instant is applied before the
    // interval that starts there is counted.
    starts.sort_by_key(|&(t, _, _)| t);
    ends.sort_unstable_by_key(|&(t, _, _)| t);
    (lenders, merge_changes(starts, ends, &row_of_slot))
}

/// Starts and ends (each sorted by instant) merged into one list sorted by instant, their
/// account slots made rows.
fn merge_changes(starts: Vec<Change>, ends: Vec<Change>, row_of_slot: &[usize]) -> Vec<Change> {
    let mut changes: Vec<Change> = Vec::with_capacity(starts.len() + ends.len());
    let (mut s, mut e) = (starts.into_iter().peekable(), ends.into_iter().peekable());
    loop {
        let next = match (s.peek(), e.peek()) {
            (Some(a), Some(b)) if a.0 <= b.0 => s.next(),
            (Some(_), Some(_)) | (None, Some(_)) => e.next(),
            (Some(_), None) => s.next(),
            (None, None) => break,
        };
        if let Some((t, slot, delta)) = next {
            changes.push((t, row_of_slot[slot], delta));
        }
    }
    changes
}

/// The instants other than usage changes (few): bounds and capacity steps within them, sorted.
/// Usage changes are merged in as the sweep goes.
fn fixed_instants(bounds: &[UnixSeconds], steps: &[CapacityStep]) -> Vec<UnixSeconds> {
    let (first, last) = (bounds[0], bounds[bounds.len() - 1]);
    let mut fixed: Vec<UnixSeconds> = bounds.to_vec();
    fixed.extend(
        steps
            .iter()
            .map(|&(from, _)| from)
            .filter(|&from| first < from && from < last),
    );
    fixed.sort_unstable();
    fixed.dedup();
    fixed
}

/// One interval of the sweep, over which everything is constant.
#[derive(Debug, Clone, Copy)]
struct Interval {
    /// Its length in seconds.
    dt: i128,
    /// The governed capacity C, in GPUs.
    capacity: u32,
    /// The sum of the quotas.
    total_quota: u64,
}

/// Add one interval to its bucket: each row's quota, allocated, in-quota and borrowed
/// GPU-seconds given the GPUs `held` per row, then what each lender lent. `idle` is scratch
/// space (one per row), kept by the caller so that the sweep allocates nothing per interval.
fn count_interval(
    sums: &mut Bucket,
    lenders: &[Lender],
    held: &[i64],
    idle: &mut [u64],
    interval: Interval,
) {
    let Interval {
        dt,
        capacity,
        total_quota,
    } = interval;
    let pool_row = lenders.len();
    let pool = u64::from(capacity).saturating_sub(total_quota);
    sums.capacity += i128::from(capacity) * dt;
    sums.rows[pool_row].quota += i128::from(pool) * dt;

    let (mut borrowed, mut lendable) = (0u64, pool);
    for (row, lender) in lenders.iter().enumerate() {
        // Never negative: every run's end is clipped like its start.
        let used = held[row].max(0) as u64;
        let in_quota = used.min(lender.quota);
        let over = used - in_quota;
        idle[row] = lender.lend_limit.min(lender.quota - in_quota);
        borrowed += over;
        lendable += idle[row];
        let row_sums = &mut sums.rows[row];
        row_sums.quota += i128::from(lender.quota) * dt;
        row_sums.allocated += i128::from(used) * dt;
        row_sums.in_quota += i128::from(in_quota) * dt;
        row_sums.borrowed += i128::from(over) * dt;
    }
    if borrowed > 0 {
        attribute_lent(sums, idle, pool, borrowed, lendable, dt);
    }
}

/// The `borrowed` GPUs of an interval attributed to the lenders: pro rata of their `idle`
/// quota and the `pool` within what is lendable; beyond it, each lender's whole lendable idle
/// quota and the excess to `(pool)`, counted apart.
fn attribute_lent(
    sums: &mut Bucket,
    idle: &[u64],
    pool: u64,
    borrowed: u64,
    lendable: u64,
    dt: i128,
) {
    let pool_row = idle.len();
    if borrowed <= lendable {
        // One rounding per share: (B x weight x dt) / lendable.
        let pro_rata = |weight: u64| exact(borrowed, weight, dt) / lendable as f64;
        for (row, &weight) in idle.iter().enumerate() {
            sums.rows[row].lent += pro_rata(weight);
        }
        sums.rows[pool_row].lent += pro_rata(pool);
    } else {
        let excess = i128::from(borrowed - lendable) * dt;
        for (row, &weight) in idle.iter().enumerate() {
            sums.rows[row].lent += exact(weight, 1, dt);
        }
        sums.rows[pool_row].lent += (i128::from(pool) * dt + excess) as f64;
        sums.over_lendable += excess as f64;
    }
}

/// a x b x dt rounded once to f64: in 64-bit integers where the product fits (one instruction to
/// convert), in 128-bit ones otherwise; the same value either way.
fn exact(a: u64, b: u64, dt: i128) -> f64 {
    let small = i64::try_from(dt)
        .ok()
        .zip(i64::try_from(a).ok())
        .zip(i64::try_from(b).ok())
        .and_then(|((dt, a), b)| a.checked_mul(b)?.checked_mul(dt));
    match small {
        Some(p) => p as f64,
        None => (i128::from(a) * i128::from(b) * dt) as f64,
    }
}

fn finish(period: Period, lenders: &[Lender], bucket: Bucket) -> UsageSplit {
    let names = lenders.iter().map(|l| l.name.as_str()).chain([POOL]);
    let rows: Vec<TeamSplit> = names
        .zip(&bucket.rows)
        .map(|(name, sums)| TeamSplit {
            team: name.to_string(),
            quota: sums.quota as f64,
            allocated: sums.allocated as f64,
            in_quota: sums.in_quota as f64,
            borrowed: sums.borrowed as f64,
            lent: sums.lent,
        })
        .collect();
    let team_sums = &bucket.rows[..lenders.len()];
    let sum = |field: fn(&Sums) -> i128| team_sums.iter().map(field).sum::<i128>() as f64;
    let totals = SplitTotals {
        capacity: bucket.capacity as f64,
        unallocated: bucket.rows[lenders.len()].quota as f64,
        allocated: sum(|s| s.allocated),
        in_quota: sum(|s| s.in_quota),
        borrowed: sum(|s| s.borrowed),
        lent: bucket.rows.iter().map(|s| s.lent).sum(),
        over_lendable: bucket.over_lendable,
    };
    UsageSplit {
        period,
        rows,
        totals,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(team: &str, gpus: u32, start: i64, end: i64) -> Run {
        Run {
            team: team.into(),
            gpus,
            start,
            end,
        }
    }

    fn team(name: &str, quota: u32, lend_limit: u32) -> TeamQuota {
        TeamQuota {
            name: name.to_string(),
            quota,
            lend_limit,
        }
    }

    fn period(since: i64, until: i64) -> Period {
        Period { since, until }
    }

    #[test]
    fn runs_are_clipped_to_the_period() {
        let split = split_usage(
            &[
                run("a", 2, -50, 50),
                run("a", 1, 90, 500),
                run("a", 3, 100, 200),
            ],
            &[team("a", 4, 0)],
            &[(0, 4)],
            period(0, 100),
        );
        let a = split.row("a").unwrap();
        assert_eq!(a.allocated, 2.0 * 50.0 + 10.0);
        assert_eq!(a.in_quota, a.allocated);
        assert_eq!(a.quota, 400.0);
        assert_eq!(split.totals.capacity, 400.0);
    }

    #[test]
    fn an_account_without_quota_only_borrows_and_rows_are_ordered() {
        let split = split_usage(
            &[run("stray", 1, 0, 10)],
            &[team("zeta", 1, 1), team("alpha", 1, 0)],
            &[(0, 3)],
            period(0, 10),
        );
        let names: Vec<&str> = split.rows.iter().map(|r| r.team.as_str()).collect();
        assert_eq!(names, ["alpha", "stray", "zeta", POOL]);
        let stray = split.row("stray").unwrap();
        assert_eq!((stray.in_quota, stray.borrowed), (0.0, 10.0));
        // Lendable: zeta 1 (alpha lends nothing), pool 3 - 2 = 1: half each.
        assert_eq!(split.row("zeta").unwrap().lent, 5.0);
        assert_eq!(split.row(POOL).unwrap().lent, 5.0);
        assert_eq!(split.row("alpha").unwrap().lent, 0.0);
    }

    #[test]
    fn borrowing_beyond_what_is_lendable_goes_to_the_pool_and_is_counted() {
        // Capacity dropped to 4 under quotas of 2 + 2: no pool; b lends at most 1 of its 2 idle
        // GPUs, but a borrows 3 (over its quota) for 10 s.
        let split = split_usage(
            &[run("a", 5, 0, 10)],
            &[team("a", 2, 2), team("b", 2, 1)],
            &[(0, 4)],
            period(0, 10),
        );
        assert_eq!(split.row("b").unwrap().lent, 10.0);
        assert_eq!(split.row(POOL).unwrap().lent, 20.0);
        assert_eq!(split.totals.over_lendable, 20.0);
        assert_eq!(split.totals.lent, split.totals.borrowed);
    }

    #[test]
    fn capacity_before_the_first_step_is_the_first_step() {
        let split = split_usage(&[], &[team("a", 1, 1)], &[(50, 3), (80, 1)], period(0, 100));
        assert_eq!(split.totals.capacity, 80.0 * 3.0 + 20.0);
        assert_eq!(split.totals.unallocated, 80.0 * 2.0);
        let none = split_usage(&[], &[team("a", 1, 1)], &[], period(0, 100));
        assert_eq!(none.totals.capacity, 0.0);
    }

    #[test]
    fn empty_and_reversed_periods_have_no_usage() {
        let runs = [run("a", 1, 0, 100)];
        let teams = [team("a", 1, 1)];
        let split = split_usage(&runs, &teams, &[(0, 1)], period(50, 50));
        assert_eq!(split.totals.allocated, 0.0);
        let split = split_usage(&runs, &teams, &[(0, 1)], period(60, 50));
        assert_eq!(split.totals.allocated, 0.0);
        assert_eq!(split.rows.len(), 2);
        let days = split_usage_by_day(&runs, &teams, &[(0, 1)], period(60, 50), utc());
        assert!(days.is_empty());
    }

    fn utc() -> FixedOffset {
        FixedOffset::east_opt(0).unwrap()
    }

    #[test]
    fn the_peak_is_the_most_gpus_held_at_once_within_the_period() {
        let runs = [
            run("a", 2, 0, 10),
            run("b", 3, 10, 20), // starts where a's ends: 3, not 5
            run("a", 1, 15, 30),
            run("c", 8, 40, 50), // outside the period
        ];
        assert_eq!(peak_gpus(&runs, period(0, 40)), 4);
        assert_eq!(peak_gpus(&runs, period(0, 10)), 2);
        assert_eq!(peak_gpus(&runs, period(45, 46)), 8);
        assert_eq!(peak_gpus(&[], period(0, 40)), 0);
    }

    #[test]
    fn days_follow_the_offset() {
        // 2024-03-01T00:00:00Z; in UTC-3 the day changes at 03:00Z.
        let t0 = 1_709_251_200;
        let brt = FixedOffset::west_opt(3 * 3600).unwrap();
        let days = split_usage_by_day(
            &[run("a", 1, t0, t0 + 2 * 86_400)],
            &[team("a", 1, 0)],
            &[(t0, 1)],
            period(t0, t0 + 86_400),
            brt,
        );
        let dates: Vec<String> = days.iter().map(|d| d.date.to_string()).collect();
        assert_eq!(dates, ["2024-02-29", "2024-03-01"]);
        assert_eq!(days[0].split.period, period(t0, t0 + 3 * 3600));
        assert_eq!(days[1].split.period, period(t0 + 3 * 3600, t0 + 86_400));
        assert_eq!(days[1].split.row("a").unwrap().allocated, 21.0 * 3600.0);
        // A period that starts at a local midnight is one day per day.
        let days = split_usage_by_day(&[], &[], &[], period(t0, t0 + 2 * 86_400), utc());
        assert_eq!(days.len(), 2);
    }
}
