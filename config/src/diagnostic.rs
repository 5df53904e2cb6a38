//! What is wrong with a configuration, where (file:line:column), and how to fix it.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

/// A place in a configuration file. `line` and `column` are 1-based; the column counts characters,
/// not bytes, so it matches what an editor shows.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    pub file: String,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// One problem in a configuration file.
///
/// Displayed as `teamshare.toml:12:9: error: <message>`, followed by `\n  hint: <hint>` when there
/// is a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn new(at: &Location, message: impl Into<String>) -> Self {
        Self {
            file: at.file.clone(),
            line: at.line,
            column: at.column,
            message: message.into(),
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn location(&self) -> Location {
        Location {
            file: self.file.clone(),
            line: self.line,
            column: self.column,
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: error: {}",
            self.file, self.line, self.column, self.message
        )?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostic {}

/// Every problem found in one file, sorted by position.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // The cause is in the message too: the plugin logs one line, not an error chain.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file was read but is not a valid configuration; every problem is listed.
    #[error("{0}")]
    Invalid(Diagnostics),
}

impl ConfigError {
    /// The problems found in the file, when it could be read at all.
    pub fn diagnostics(&self) -> Option<&Diagnostics> {
        match self {
            ConfigError::Io { .. } => None,
            ConfigError::Invalid(diagnostics) => Some(diagnostics),
        }
    }
}

/// Turns byte offsets of one source text into locations.
pub(crate) struct SourceMap<'s> {
    origin: &'s str,
    text: &'s str,
    /// Byte offset at which each line starts; the first is 0.
    line_starts: Vec<usize>,
}

impl<'s> SourceMap<'s> {
    pub(crate) fn new(origin: &'s str, text: &'s str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self {
            origin,
            text,
            line_starts,
        }
    }

    pub(crate) fn location(&self, offset: usize) -> Location {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line_index = self.line_starts.partition_point(|&start| start <= offset) - 1;
        let line_start = self.line_starts[line_index];
        Location {
            file: self.origin.to_owned(),
            line: line_index + 1,
            column: self.text[line_start..offset].chars().count() + 1,
        }
    }

    /// The start of `span`, or the top of the file when the parser recorded no position.
    pub(crate) fn span_start(&self, span: Option<Range<usize>>) -> Location {
        self.location(span.map_or(0, |span| span.start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_one_based_and_count_characters() {
        let text = "a = 1\nname = \"é\" x\n\nlast";
        let map = SourceMap::new("f.toml", text);
        let at = |offset| {
            let l = map.location(offset);
            (l.line, l.column)
        };
        assert_eq!(at(0), (1, 1));
        assert_eq!(at(4), (1, 5));
        assert_eq!(at(5), (1, 6), "the newline itself is still on line 1");
        assert_eq!(at(6), (2, 1));
        // `x` comes after a two-byte character: byte 18, character column 12.
        assert_eq!(&text[18..19], "x");
        assert_eq!(at(18), (2, 12));
        assert_eq!(at(20), (3, 1));
        assert_eq!(at(text.len()), (4, 5));
        assert_eq!(at(10_000), (4, 5));
    }

    #[test]
    fn display_has_the_hint_on_its_own_line_only_when_present() {
        let at = Location {
            file: "teamshare.toml".into(),
            line: 12,
            column: 9,
        };
        let plain = Diagnostic::new(&at, "boom");
        assert_eq!(plain.to_string(), "teamshare.toml:12:9: error: boom");
        let hinted = plain.clone().with_hint("try this");
        assert_eq!(
            hinted.to_string(),
            "teamshare.toml:12:9: error: boom\n  hint: try this"
        );
        let all = Diagnostics(vec![hinted, plain]);
        assert_eq!(
            all.to_string(),
            "teamshare.toml:12:9: error: boom\n  hint: try this\nteamshare.toml:12:9: error: boom"
        );
    }
}
