//! Reading the parsable output of Slurm's client commands: lines of `|`-separated fields
//! (`sacct -P`, `sacctmgr -P`, `sinfo -o '%N|%G|%t'`, `squeue -O 'Field:|,...'`).
//!
//! One splitter ([`fields`], with its three [`Shape`]s) and one error for a line that cannot
//! be read ([`MalformedLine`]), whichever command printed it: every reader says what is wrong
//! with a line the same way, with the command, the line's number, the reason and its text.

/// How much of a line's text a [`MalformedLine`] keeps (a line is user input: a job's
/// AdminComment may be long).
pub const TEXT_LIMIT: usize = 300;

/// A line of a command's parsable output that could not be read: `{command} line {n}: {reason}:
/// `{content}``.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{command} line {line_number}: {reason}: `{content}`")]
pub struct MalformedLine {
    /// What printed the line (`sacct`, `squeue`, `sinfo`, `sacctmgr association`).
    pub command: &'static str,
    /// 1-based line number in the command's output.
    pub line_number: usize,
    pub reason: String,
    /// The line, cut to [`TEXT_LIMIT`] characters (`…` marks a cut).
    pub content: String,
}

impl MalformedLine {
    pub fn new(
        command: &'static str,
        line_number: usize,
        reason: impl Into<String>,
        line: &str,
    ) -> MalformedLine {
        let mut content: String = line.chars().take(TEXT_LIMIT).collect();
        if content.len() < line.len() {
            content.push('…');
        }
        MalformedLine {
            command,
            line_number,
            reason: reason.into(),
            content,
        }
    }
}

/// A line without the fields its reader expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("expected {}{expected} `|`-separated fields, found {found}", if *.at_least { "at least " } else { "" })]
pub struct FieldCount {
    pub expected: usize,
    /// Whether more fields would have been read ([`Shape::Leading`], [`Shape::Rest`]).
    pub at_least: bool,
    pub found: usize,
}

/// How a line's fields are to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Exactly N fields.
    Exactly,
    /// At least N fields; the first N are read and the others ignored (a format that ends
    /// each field with `|` leaves an empty one at the end).
    Leading,
    /// At least N fields; the Nth is all that follows the (N-1)th `|`, separators included
    /// (a last field users may write `|` into, such as squeue's AdminComment).
    Rest,
}

/// The fields of `line` read as `shape` says, without copying them.
pub fn fields<const N: usize>(line: &str, shape: Shape) -> Result<[&str; N], FieldCount> {
    let mut out = [""; N];
    let count = |found| FieldCount {
        expected: N,
        at_least: shape != Shape::Exactly,
        found,
    };
    let limit = if shape == Shape::Rest { N } else { usize::MAX };
    let mut pieces = line.splitn(limit, '|');
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = pieces.next().ok_or_else(|| count(i))?;
    }
    if shape == Shape::Exactly {
        let extra = pieces.count();
        if extra > 0 {
            return Err(count(N + extra));
        }
    }
    Ok(out)
}

/// The lines of `text` that are not blank, with their 1-based number in it (blank lines are
/// numbered but not returned, so that numbers stay those an administrator sees).
pub fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| (i + 1, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_n_fields() {
        assert_eq!(fields::<3>("a|b|", Shape::Exactly), Ok(["a", "b", ""]));
        let e = fields::<3>("a|b", Shape::Exactly).unwrap_err();
        assert_eq!(e.found, 2);
        assert_eq!(e.to_string(), "expected 3 `|`-separated fields, found 2");
        let e = fields::<3>("a|b|c|d|e", Shape::Exactly).unwrap_err();
        assert_eq!(e.found, 5);
        assert_eq!(fields::<3>("garbage", Shape::Exactly).unwrap_err().found, 1);
    }

    #[test]
    fn leading_fields_ignore_the_rest() {
        assert_eq!(fields::<2>("a|b|c|", Shape::Leading), Ok(["a", "b"]));
        let e = fields::<3>("a|b", Shape::Leading).unwrap_err();
        assert_eq!(
            e.to_string(),
            "expected at least 3 `|`-separated fields, found 2"
        );
    }

    #[test]
    fn the_last_field_may_hold_the_rest() {
        assert_eq!(fields::<2>("a|b|c|", Shape::Rest), Ok(["a", "b|c|"]));
        assert_eq!(fields::<2>("a|", Shape::Rest), Ok(["a", ""]));
        assert_eq!(fields::<3>("a|b", Shape::Rest).unwrap_err().found, 2);
    }

    #[test]
    fn a_malformed_line_says_where_and_keeps_a_bounded_text() {
        let m = MalformedLine::new("sinfo", 4, "expected 3 fields", "n1 gpu:8 idle");
        assert_eq!(
            m.to_string(),
            "sinfo line 4: expected 3 fields: `n1 gpu:8 idle`"
        );
        let long = "x".repeat(TEXT_LIMIT + 10);
        let m = MalformedLine::new("squeue", 1, "bad", &long);
        assert_eq!(m.content.chars().count(), TEXT_LIMIT + 1);
        assert!(m.content.ends_with('…'));
    }

    #[test]
    fn blank_lines_keep_the_numbering() {
        let got: Vec<_> = lines("\na\n  \nb\n").collect();
        assert_eq!(got, [(2, "a"), (4, "b")]);
    }
}
