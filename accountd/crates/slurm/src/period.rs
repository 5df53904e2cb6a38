//! Instants and periods: how times are written by Slurm and by administrators, and how they are
//! stored (UTC unix seconds).
//!
//! Slurm prints and reads times in the local time of the process (`YYYY-MM-DDTHH:MM:SS`, no
//! offset). Every conversion between that form and unix seconds happens here, against an explicit
//! time zone, so that tests can pin the zone and the daemon can pin sacct's (see `sacct`).

use chrono::{DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};

/// Seconds since the Unix epoch, UTC: the only form times are stored and computed in.
pub type UnixSeconds = i64;

/// The layout of Slurm's `standard` time format (`SLURM_TIME_FORMAT=standard`).
pub const SLURM_TIME_LAYOUT: &str = "%Y-%m-%dT%H:%M:%S";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("`{text}` is not a time: expected YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS, now, now-<duration> or now+<duration> (e.g. now-2h)")]
    Unrecognised { text: String },
    #[error("`{text}`: {reason}")]
    BadDuration { text: String, reason: String },
    #[error(
        "`{text}` does not exist in the local time zone (skipped by a daylight-saving change)"
    )]
    NonexistentLocalTime { text: String },
    #[error("`{text}` is out of range")]
    OutOfRange { text: String },
}

/// A half-open interval `[since, until)` of instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub since: UnixSeconds,
    pub until: UnixSeconds,
}

impl Period {
    /// Seconds of `[start, end)` that fall inside the period; 0 when they do not meet.
    pub fn overlap(&self, start: UnixSeconds, end: UnixSeconds) -> i64 {
        (end.min(self.until) - start.max(self.since)).max(0)
    }
}

/// Read a local date-time in Slurm's standard layout.
///
/// A local time that occurs twice (the hour repeated when daylight saving ends) is read as the
/// earlier instant; one that never occurs is an error.
pub fn parse_local_datetime<Tz: TimeZone>(text: &str, tz: &Tz) -> Result<UnixSeconds, TimeError> {
    // The exact layout sacct prints is read by position (an ingest reads three per record);
    // anything else goes through chrono's parser, which also takes unpadded fields.
    let naive = match fixed_layout(text) {
        Some(naive) => naive,
        None => NaiveDateTime::parse_from_str(text, SLURM_TIME_LAYOUT).map_err(|_| {
            TimeError::Unrecognised {
                text: text.to_string(),
            }
        })?,
    };
    local_to_unix(naive, text, tz)
}

/// `YYYY-MM-DDTHH:MM:SS` exactly (19 bytes, every field zero-padded), validated as a date.
fn fixed_layout(text: &str) -> Option<NaiveDateTime> {
    let b = text.as_bytes();
    if b.len() != 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        b[range].iter().try_fold(0u32, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    let year = i32::try_from(num(0..4)?).ok()?;
    NaiveDate::from_ymd_opt(year, num(5..7)?, num(8..10)?)?.and_hms_opt(
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    )
}

fn local_to_unix<Tz: TimeZone>(
    naive: NaiveDateTime,
    text: &str,
    tz: &Tz,
) -> Result<UnixSeconds, TimeError> {
    match tz.from_local_datetime(&naive) {
        LocalResult::Single(t) => Ok(t.timestamp()),
        LocalResult::Ambiguous(earlier, _) => Ok(earlier.timestamp()),
        LocalResult::None => Err(TimeError::NonexistentLocalTime {
            text: text.to_string(),
        }),
    }
}

/// Read a time given on the command line: `YYYY-MM-DD` (local midnight),
/// `YYYY-MM-DDTHH:MM:SS` (local), `now`, or `now-<duration>` / `now+<duration>` with a duration in the
/// configuration's syntax (`teamshare_config::parse_duration`, e.g. `2h`, `30m`, `7d`).
pub fn parse_time_arg<Tz: TimeZone>(
    text: &str,
    now: UnixSeconds,
    tz: &Tz,
) -> Result<UnixSeconds, TimeError> {
    let trimmed = text.trim();
    if trimmed == "now" {
        return Ok(now);
    }
    let relative = trimmed
        .strip_prefix("now-")
        .map(|r| (r, -1i64))
        .or_else(|| trimmed.strip_prefix("now+").map(|r| (r, 1i64)));
    if let Some((rest, sign)) = relative {
        let duration =
            teamshare_config::parse_duration(rest).map_err(|e| TimeError::BadDuration {
                text: text.to_string(),
                reason: e.to_string(),
            })?;
        let secs = i64::try_from(duration.as_secs()).map_err(|_| TimeError::OutOfRange {
            text: text.to_string(),
        })?;
        return now
            .checked_add(sign * secs)
            .ok_or_else(|| TimeError::OutOfRange {
                text: text.to_string(),
            });
    }
    if let Ok(date) = NaiveDate::parse_from_str(trimmed, "%Y-%m-%d") {
        let midnight = date.and_hms_opt(0, 0, 0).expect("midnight exists");
        return local_to_unix(midnight, text, tz);
    }
    parse_local_datetime(trimmed, tz).map_err(|e| match e {
        TimeError::Unrecognised { .. } => TimeError::Unrecognised {
            text: text.to_string(),
        },
        other => other,
    })
}

/// 00:00 local time on the first day of the month that contains `now`.
pub fn month_start<Tz: TimeZone>(now: UnixSeconds, tz: &Tz) -> UnixSeconds {
    let local = tz.timestamp_opt(now, 0).single().map(|t| t.naive_local());
    let Some(local) = local else { return now };
    let first = NaiveDate::from_ymd_opt(local.year(), local.month(), 1)
        .expect("the first of a month is a valid date");
    day_start(first, tz).unwrap_or(now)
}

/// The first instant of local date `date` in `tz`: its midnight or, in a zone whose midnight is
/// skipped that day (rare, but it happens), the first quarter hour after it that exists.
fn day_start<Tz: TimeZone>(date: NaiveDate, tz: &Tz) -> Option<UnixSeconds> {
    let midnight = date.and_hms_opt(0, 0, 0).expect("midnight is a time");
    (0..4 * 3600)
        .step_by(900)
        .find_map(|offset| {
            tz.from_local_datetime(&(midnight + chrono::Duration::seconds(offset)))
                .earliest()
        })
        .map(|t| t.timestamp())
}

/// The local days of `period` in `tz`: the period's bounds with every local midnight between
/// them, in order (so consecutive pairs are the days, the first and last clipped to the period).
/// A day is 23 or 25 hours long where daylight saving changes; a midnight that does not exist
/// is the day's first instant that does.
pub fn local_day_bounds<Tz: TimeZone>(period: Period, tz: &Tz) -> Vec<UnixSeconds> {
    let mut bounds = vec![period.since];
    let Some(mut date) = tz
        .timestamp_opt(period.since, 0)
        .earliest()
        .map(|t| t.naive_local().date())
    else {
        bounds.push(period.until);
        return bounds;
    };
    while let Some(next) = date.succ_opt() {
        date = next;
        let Some(t) = day_start(date, tz) else { break };
        if t >= period.until {
            break;
        }
        if t > period.since {
            bounds.push(t);
        }
    }
    bounds.push(period.until);
    bounds
}

/// Format an instant in `tz` in Slurm's standard layout (what sacct's `-S`/`-E` read).
pub fn format_local<Tz: TimeZone>(t: UnixSeconds, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    match tz.timestamp_opt(t, 0) {
        LocalResult::Single(dt) | LocalResult::Ambiguous(dt, _) => {
            dt.format(SLURM_TIME_LAYOUT).to_string()
        }
        LocalResult::None => t.to_string(),
    }
}

/// RFC 3339 in UTC, e.g. `2024-05-01T03:00:00Z`: the form machine-readable output uses.
pub fn format_rfc3339(t: UnixSeconds) -> String {
    match DateTime::<Utc>::from_timestamp(t, 0) {
        Some(dt) => dt.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => t.to_string(),
    }
}

/// The current time, in the one form used everywhere.
pub fn now() -> UnixSeconds {
    Utc::now().timestamp()
}

/// The current time in milliseconds since the epoch (the state's `read_at_ms`).
pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::FixedOffset;

    fn brt() -> FixedOffset {
        FixedOffset::west_opt(3 * 3600).unwrap()
    }

    #[test]
    fn local_days_follow_the_zone_and_its_daylight_saving() {
        let utc_day = |t| parse_local_datetime(t, &Utc).unwrap();
        let p = Period {
            since: utc_day("2024-05-01T06:00:00"),
            until: utc_day("2024-05-03T12:00:00"),
        };
        assert_eq!(
            local_day_bounds(p, &Utc),
            [
                p.since,
                utc_day("2024-05-02T00:00:00"),
                utc_day("2024-05-03T00:00:00"),
                p.until
            ]
        );
        // Midnight at UTC-3 is 03:00 UTC.
        assert_eq!(
            local_day_bounds(p, &brt()),
            [
                p.since,
                utc_day("2024-05-02T03:00:00"),
                utc_day("2024-05-03T03:00:00"),
                p.until
            ]
        );
        // Within one day: the period alone.
        let short = Period {
            since: p.since,
            until: p.since + 60,
        };
        assert_eq!(local_day_bounds(short, &Utc), [short.since, short.until]);
        // A period starting at midnight does not repeat it.
        let whole = Period {
            since: utc_day("2024-05-01T00:00:00"),
            until: utc_day("2024-05-02T00:00:00"),
        };
        assert_eq!(local_day_bounds(whole, &Utc), [whole.since, whole.until]);
    }

    #[test]
    fn the_fixed_layout_reads_as_chrono_does() {
        for text in [
            "2024-05-01T00:00:00",
            "1999-12-31T23:59:59",
            "2024-02-29T12:34:56",
            "2023-02-29T00:00:00",
            "2024-13-01T00:00:00",
            "2024-05-01T24:00:00",
            "2024-05-01T00:60:00",
            "2024-05-01T00:00:60",
            "2024-05-0aT00:00:00",
            "2024-5-1T0:0:0",
            "2024-05-01 00:00:00",
            "+2024-05-01T00:00:00",
        ] {
            let chrono = NaiveDateTime::parse_from_str(text, SLURM_TIME_LAYOUT).ok();
            if let Some(fast) = fixed_layout(text) {
                assert_eq!(Some(fast), chrono, "{text}");
            }
            assert_eq!(
                parse_local_datetime(text, &Utc).ok(),
                chrono.map(|n| n.and_utc().timestamp()),
                "{text}"
            );
        }
    }

    #[test]
    fn slurm_local_times_are_converted_with_the_zone() {
        assert_eq!(
            parse_local_datetime("2024-05-01T00:00:00", &Utc).unwrap(),
            1_714_521_600
        );
        assert_eq!(
            parse_local_datetime("2024-05-01T00:00:00", &brt()).unwrap(),
            1_714_521_600 + 3 * 3600
        );
        assert!(parse_local_datetime("2024-05-01 00:00:00", &Utc).is_err());
        assert!(parse_local_datetime("Unknown", &Utc).is_err());
    }

    #[test]
    fn command_line_times() {
        let now = 1_714_600_000;
        assert_eq!(parse_time_arg("now", now, &Utc).unwrap(), now);
        assert_eq!(parse_time_arg("now-2h", now, &Utc).unwrap(), now - 7200);
        assert_eq!(parse_time_arg("now+1h", now, &Utc).unwrap(), now + 3600);
        assert_eq!(
            parse_time_arg("2024-05-01", now, &brt()).unwrap(),
            1_714_521_600 + 3 * 3600
        );
        assert_eq!(
            parse_time_arg("2024-05-01T12:30:00", now, &Utc).unwrap(),
            1_714_521_600 + 12 * 3600 + 1800
        );
        assert!(matches!(
            parse_time_arg("yesterday", now, &Utc),
            Err(TimeError::Unrecognised { .. })
        ));
        assert!(matches!(
            parse_time_arg("now-2 fortnights", now, &Utc),
            Err(TimeError::BadDuration { .. })
        ));
    }

    #[test]
    fn month_start_is_local_midnight_on_the_first() {
        // 2024-05-14T12:00:00Z; in UTC-3 the month began at 2024-05-01T03:00:00Z.
        let now = 1_715_688_000;
        assert_eq!(month_start(now, &brt()), 1_714_521_600 + 3 * 3600);
        assert_eq!(month_start(now, &Utc), 1_714_521_600);
        // 2024-05-01T01:00:00Z is still April in UTC-3.
        assert_eq!(
            month_start(1_714_525_200, &brt()),
            parse_time_arg("2024-04-01", 0, &brt()).unwrap()
        );
    }

    #[test]
    fn overlap_clips_to_the_period() {
        let p = Period {
            since: 100,
            until: 200,
        };
        assert_eq!(p.overlap(50, 150), 50);
        assert_eq!(p.overlap(150, 250), 50);
        assert_eq!(p.overlap(50, 250), 100);
        assert_eq!(p.overlap(120, 130), 10);
        assert_eq!(p.overlap(0, 100), 0);
        assert_eq!(p.overlap(200, 300), 0);
        assert_eq!(p.overlap(150, 150), 0);
    }

    #[test]
    fn formats() {
        assert_eq!(format_local(1_714_521_600, &Utc), "2024-05-01T00:00:00");
        assert_eq!(format_local(1_714_521_600, &brt()), "2024-04-30T21:00:00");
        assert_eq!(format_rfc3339(1_714_521_600), "2024-05-01T00:00:00Z");
    }
}
