//! The one duration parser of the project, with its formatter: `"30s"`, `"5m"`, `"1h30m"`,
//! `"2d"`, `"90"`, and on the command line also `"200ms"` (intervals shorter than a second).

use std::time::Duration;

const UNITS: &str = "s (seconds), m (minutes), h (hours) or d (days)";

/// Parses a duration written as whole numbers with units, largest unit first, each unit at most
/// once: `"30s"`, `"5m"`, `"1h"`, `"2d"`, `"1h30m"`, `"1d 12h"`. A bare number is seconds
/// (`"90"`). Fractions and negative values are refused; the error says why and what would be
/// accepted.
///
/// # Errors
/// A one-line reason, naming the input, when `s` is not such a duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text.is_empty() {
        return Err("empty duration; write for example \"30s\", \"5m\" or \"1h30m\"".into());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| format!("duration \"{text}\" is too large"));
    }

    let mut seconds: u64 = 0;
    // Rank of the previous unit (d = 3 ... s = 0): units must strictly decrease.
    let mut previous_rank: Option<u8> = None;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(if rest.starts_with('-') {
                format!("duration \"{text}\" is negative; durations count forward from zero")
            } else {
                format!("expected a number at \"{rest}\" in duration \"{text}\"")
            });
        }
        let (number, after) = rest.split_at(digits);
        let count: u64 = number
            .parse()
            .map_err(|_| format!("duration \"{text}\" is too large"))?;
        if after.starts_with(['.', ',']) {
            return Err(format!(
                "fractions are not supported in duration \"{text}\"; use a smaller unit, e.g. \"1h30m\" for 1.5h"
            ));
        }
        // "30 s" and "30 seconds" should meet the unit check, not "missing unit".
        let after = after.trim_start_matches(' ');
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(unit_len);
        let (unit_seconds, rank) = match unit {
            "s" => (1, 0),
            "m" => (60, 1),
            "h" => (3_600, 2),
            "d" => (86_400, 3),
            "" => {
                return Err(format!(
                    "missing unit after {count} in duration \"{text}\"; use {UNITS}"
                ))
            }
            other => {
                return Err(format!(
                    "unknown unit `{other}` in duration \"{text}\"; use {UNITS}"
                ))
            }
        };
        if previous_rank.is_some_and(|previous| rank >= previous) {
            return Err(format!(
                "units in duration \"{text}\" must go from largest to smallest, each at most once (e.g. \"1h30m\")"
            ));
        }
        previous_rank = Some(rank);
        seconds = count
            .checked_mul(unit_seconds)
            .and_then(|part| seconds.checked_add(part))
            .ok_or_else(|| format!("duration \"{text}\" is too large"))?;
        // One space between parts reads naturally ("1d 12h").
        rest = after.strip_prefix(' ').unwrap_or(after);
    }
    Ok(Duration::from_secs(seconds))
}

/// [`parse_duration`], or whole milliseconds (`"200ms"`): the command line's intervals, which
/// may be shorter than a second. teamshare.toml's durations are whole seconds.
///
/// # Errors
/// A one-line reason, naming the input.
pub fn parse_duration_ms(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    match text.strip_suffix("ms").map(str::trim_end) {
        Some(ms) if !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()) => ms
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("duration \"{text}\" is too large")),
        _ => parse_duration(text),
    }
}

/// A duration as the configuration writes it, the largest whole unit: `7d`, `12h`, `2m`,
/// `90s`, and `200ms` below whole seconds. [`parse_duration_ms`] reads every result back.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if d.subsec_nanos() != 0 => format!("{}ms", d.as_millis()),
        _ if s != 0 && s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s != 0 && s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s != 0 && s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: &str) -> u64 {
        parse_duration(s)
            .unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
            .as_secs()
    }

    #[test]
    fn accepts_units_combinations_and_bare_seconds() {
        assert_eq!(secs("30s"), 30);
        assert_eq!(secs("5m"), 300);
        assert_eq!(secs("1h"), 3_600);
        assert_eq!(secs("2d"), 172_800);
        assert_eq!(secs("1h30m"), 5_400);
        assert_eq!(secs("1d12h"), 129_600);
        assert_eq!(secs("1d 12h"), 129_600);
        assert_eq!(secs("1h0m5s"), 3_605);
        assert_eq!(secs("90"), 90);
        assert_eq!(secs("0"), 0);
        assert_eq!(secs("0s"), 0);
        assert_eq!(secs("  45s "), 45);
        assert_eq!(secs("30 s"), 30);
    }

    fn error(s: &str) -> String {
        match parse_duration(s) {
            Ok(d) => panic!("{s:?} should be refused, got {d:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn refuses_malformed_durations_with_a_reason() {
        assert!(error("").contains("empty"));
        assert!(error("   ").contains("empty"));
        assert!(error("5x").contains("unknown unit `x`"));
        assert!(error("5ms").contains("unknown unit `ms`"));
        assert!(error("1h30").contains("missing unit after 30"));
        assert!(error("30 seconds").contains("unknown unit `seconds`"));
        assert!(error("-5s").contains("negative"));
        assert!(error("1.5h").contains("fractions"));
        assert!(error("30m1h").contains("largest to smallest"));
        assert!(error("1m1m").contains("largest to smallest"));
        assert!(error("h").contains("expected a number"));
        assert!(error("1h  30m").contains("expected a number"));
        assert!(error("99999999999999999999").contains("too large"));
        assert!(error("9999999999999999d").contains("too large"));
    }

    #[test]
    fn milliseconds_on_the_command_line() {
        assert_eq!(parse_duration_ms("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(
            parse_duration_ms(" 500 ms "),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(parse_duration_ms("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration_ms("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration_ms("ms")
            .unwrap_err()
            .contains("expected a number"));
        assert!(parse_duration_ms("1.5ms").is_err());
        assert!(parse_duration_ms("99999999999999999999ms")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_duration_ms("fast").is_err());
    }

    #[test]
    fn durations_are_written_as_the_configuration_writes_them_and_read_back() {
        let f = |s: u64| format_duration(Duration::from_secs(s));
        assert_eq!(
            [f(0), f(45), f(120), f(7200), f(7 * 86_400), f(90 * 60 + 1)],
            ["0s", "45s", "2m", "2h", "7d", "5401s"]
        );
        assert_eq!(format_duration(Duration::from_millis(200)), "200ms");
        for d in [
            Duration::from_millis(1),
            Duration::from_millis(1_500),
            Duration::from_secs(59),
            Duration::from_secs(3_600 * 25),
        ] {
            assert_eq!(parse_duration_ms(&format_duration(d)), Ok(d));
        }
    }
}
