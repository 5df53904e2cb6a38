//! Reading typed values out of the parsed document, each problem reported at the key or value
//! it is about.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use toml_edit::{Item, Key, TableLike, Value};

use crate::diagnostic::{Diagnostic, SourceMap};
use crate::duration::parse_duration;
use crate::suggest::closest;

pub(super) type Span = Range<usize>;

const DURATION_EXAMPLES: &str =
    "write a duration such as \"30s\", \"5m\", \"1h30m\" or \"7d\", or a whole number of seconds";

/// A table of the file being read.
pub(super) struct Section<'d> {
    pub(super) table: &'d dyn TableLike,
    /// Where it starts: its header, its inline table, or the key that names it.
    pub(super) span: Option<Span>,
    /// How messages name it: `[cluster]`, `[[team]]`, `[gpu_types.h100]`...
    pub(super) title: String,
    /// Known keys that are absent but were reported as misspelt: not reported again as missing.
    pub(super) misspelt: Vec<&'static str>,
}

impl<'d> Section<'d> {
    pub(super) fn new(
        table: &'d dyn TableLike,
        span: Option<Span>,
        title: impl Into<String>,
    ) -> Self {
        Self {
            table,
            span,
            title: title.into(),
            misspelt: Vec::new(),
        }
    }

    pub(super) fn field(&self, name: &str) -> Option<Field<'d>> {
        let (key, item) = self.table.get_key_value(name)?;
        Some(Field {
            key,
            item,
            section: self.title.clone(),
        })
    }

    /// Every key of the section, in file order.
    pub(super) fn fields(&self) -> Vec<Field<'d>> {
        self.table
            .iter()
            .filter_map(|(name, _)| self.field(name))
            .collect()
    }
}

/// One key of a section and its value.
pub(super) struct Field<'d> {
    pub(super) key: &'d Key,
    pub(super) item: &'d Item,
    pub(super) section: String,
}

impl Field<'_> {
    pub(super) fn name(&self) -> &str {
        self.key.get()
    }

    /// `` `quota` in [[team]] ``
    pub(super) fn what(&self) -> String {
        format!("`{}` in {}", self.name(), self.section)
    }

    pub(super) fn key_span(&self) -> Option<Span> {
        self.key.span()
    }

    /// The value, or the key where the value has no position of its own (implicit tables).
    pub(super) fn span(&self) -> Option<Span> {
        self.item.span().or_else(|| self.key.span())
    }
}

/// "a string", "an integer"...: what a value is, for messages.
pub(super) fn describe(item: &Item) -> &'static str {
    match item {
        Item::None => "nothing",
        Item::Table(_) => "a table",
        Item::ArrayOfTables(_) => "an array of tables",
        Item::Value(value) => match value {
            Value::String(_) => "a string",
            Value::Integer(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Boolean(_) => "a boolean",
            Value::Datetime(_) => "a date-time",
            Value::Array(_) => "an array",
            Value::InlineTable(_) => "a table",
        },
    }
}

pub(super) struct Checker<'s> {
    pub(super) map: SourceMap<'s>,
    pub(super) problems: Vec<Diagnostic>,
}

impl Checker<'_> {
    pub(super) fn error(
        &mut self,
        span: Option<Span>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        let at = self.map.span_start(span);
        self.problems
            .push(Diagnostic::new(&at, message).with_hint(hint));
    }

    pub(super) fn wrong_type(&mut self, field: &Field<'_>, expected: &str, example: &str) {
        self.error(
            field.span(),
            format!(
                "{} must be {expected}, not {}",
                field.what(),
                describe(field.item)
            ),
            format!("for example: {} = {example}", field.name()),
        );
    }

    /// Reports every key of `section` that is not in `known`.
    pub(super) fn unknown_keys(&mut self, section: &mut Section<'_>, known: &[&'static str]) {
        for field in section.fields() {
            if known.contains(&field.name()) {
                continue;
            }
            let hint = match closest(field.name(), known) {
                Some(suggestion) => {
                    if !section.table.contains_key(suggestion) {
                        section.misspelt.push(suggestion);
                    }
                    format!("did you mean `{suggestion}`?")
                }
                None => format!("expected one of {}", known.join(", ")),
            };
            self.error(
                field.key_span(),
                format!("unknown field `{}` in {}", field.name(), section.title),
                hint,
            );
        }
    }

    /// The field, or a "missing" error unless it was already reported as misspelt.
    pub(super) fn required<'d>(
        &mut self,
        section: &Section<'d>,
        name: &str,
        hint: &str,
    ) -> Option<Field<'d>> {
        let field = section.field(name);
        if field.is_none() && !section.misspelt.contains(&name) {
            self.error(
                section.span.clone(),
                format!("missing `{name}` in {}", section.title),
                hint,
            );
        }
        field
    }

    /// A sub-table, or an error saying how to write one.
    pub(super) fn table<'d>(
        &mut self,
        field: &Field<'d>,
        title: String,
        hint: &str,
    ) -> Option<Section<'d>> {
        match field.item.as_table_like() {
            Some(table) => Some(Section::new(table, field.span(), title)),
            None => {
                self.error(
                    field.span(),
                    format!("{title} must be a table, not {}", describe(field.item)),
                    hint,
                );
                None
            }
        }
    }

    /// The entries of `[[name]]`, or `None` (reported) when it is something else.
    pub(super) fn array_of_tables<'d>(
        &mut self,
        field: &Field<'d>,
        title: &str,
    ) -> Option<Vec<Section<'d>>> {
        let fallback = field.key_span();
        match field.item {
            Item::ArrayOfTables(array) => Some(
                array
                    .iter()
                    .map(|table| {
                        let span = table.span().or_else(|| fallback.clone());
                        Section::new(table, span, title)
                    })
                    .collect(),
            ),
            Item::Value(Value::Array(array)) if array.iter().all(Value::is_inline_table) => Some(
                array
                    .iter()
                    .filter_map(Value::as_inline_table)
                    .map(|table| {
                        let span = table.span().or_else(|| fallback.clone());
                        Section::new(table, span, title)
                    })
                    .collect(),
            ),
            other => {
                self.error(
                    field.span(),
                    format!(
                        "`{}` must be an array of tables, not {}",
                        field.name(),
                        describe(other)
                    ),
                    format!("write each entry as its own {title} section (double brackets)"),
                );
                None
            }
        }
    }

    pub(super) fn string<'d>(&mut self, field: &Field<'d>) -> Option<&'d str> {
        let text = field.item.as_str();
        if text.is_none() {
            self.wrong_type(field, "a string", "\"...\"");
        }
        text
    }

    pub(super) fn non_empty_string<'d>(
        &mut self,
        field: &Field<'d>,
        example: &str,
    ) -> Option<&'d str> {
        let text = self.string(field)?;
        if text.trim().is_empty() {
            self.error(
                field.span(),
                format!("{} must not be empty", field.what()),
                format!("for example: {} = {example}", field.name()),
            );
            return None;
        }
        Some(text)
    }

    pub(super) fn boolean(&mut self, field: &Field<'_>) -> Option<bool> {
        let value = field.item.as_bool();
        if value.is_none() {
            self.wrong_type(field, "true or false", "true");
        }
        value
    }

    /// A non-negative integer that fits a `u32`: a number of GPUs, a weight, a priority.
    pub(super) fn count(&mut self, field: &Field<'_>, example: &str) -> Option<u32> {
        let Some(value) = field.item.as_integer() else {
            self.wrong_type(field, "a non-negative integer", example);
            return None;
        };
        self.count_in_range(field, value, example)
    }

    pub(super) fn count_in_range(
        &mut self,
        field: &Field<'_>,
        value: i64,
        example: &str,
    ) -> Option<u32> {
        match u32::try_from(value) {
            Ok(count) => Some(count),
            Err(_) => {
                let problem = if value < 0 {
                    "must not be negative"
                } else {
                    "is too large"
                };
                self.error(
                    field.span(),
                    format!("{} {problem} (got {value})", field.what()),
                    format!("for example: {} = {example}", field.name()),
                );
                None
            }
        }
    }

    /// A finite number, integer or float.
    pub(super) fn number(&mut self, field: &Field<'_>, example: &str) -> Option<f64> {
        let value = match field.item.as_value() {
            Some(Value::Integer(integer)) => *integer.value() as f64,
            Some(Value::Float(float)) => *float.value(),
            _ => {
                self.wrong_type(field, "a number", example);
                return None;
            }
        };
        if !value.is_finite() {
            self.error(
                field.span(),
                format!("{} must be a finite number, not {value}", field.what()),
                format!("for example: {} = {example}", field.name()),
            );
            return None;
        }
        Some(value)
    }

    /// A number within `min..=max`; `rule` says the range in words.
    pub(super) fn number_within(
        &mut self,
        field: &Field<'_>,
        min: f64,
        max: f64,
        rule: &str,
        example: &str,
    ) -> Option<f64> {
        let value = self.number(field, example)?;
        if value < min || value > max {
            self.error(
                field.span(),
                format!("{} must be {rule} (got {value})", field.what()),
                format!("for example: {} = {example}", field.name()),
            );
            return None;
        }
        Some(value)
    }

    /// A duration string (see [`parse_duration`]) or whole seconds.
    pub(super) fn duration(&mut self, field: &Field<'_>) -> Option<Duration> {
        match field.item.as_value() {
            Some(Value::String(text)) => match parse_duration(text.value()) {
                Ok(duration) => Some(duration),
                Err(reason) => {
                    self.error(
                        field.span(),
                        format!("invalid duration for {}: {reason}", field.what()),
                        DURATION_EXAMPLES,
                    );
                    None
                }
            },
            Some(Value::Integer(seconds)) => {
                let seconds = *seconds.value();
                match u64::try_from(seconds) {
                    Ok(seconds) => Some(Duration::from_secs(seconds)),
                    Err(_) => {
                        self.error(
                            field.span(),
                            format!("{} must not be negative (got {seconds})", field.what()),
                            DURATION_EXAMPLES,
                        );
                        None
                    }
                }
            }
            _ => {
                self.wrong_type(field, "a duration", "\"30s\"");
                None
            }
        }
    }

    pub(super) fn positive_duration(&mut self, field: &Field<'_>) -> Option<Duration> {
        let duration = self.duration(field)?;
        if duration.is_zero() {
            self.error(
                field.span(),
                format!("{} must be longer than zero", field.what()),
                DURATION_EXAMPLES,
            );
            return None;
        }
        Some(duration)
    }

    /// One of a fixed set of strings.
    pub(super) fn choice<T: Copy>(
        &mut self,
        field: &Field<'_>,
        options: &[(&'static str, T)],
    ) -> Option<T> {
        let names: Vec<&'static str> = options.iter().map(|&(name, _)| name).collect();
        let Some(text) = field.item.as_str() else {
            self.wrong_type(
                field,
                &format!("one of {}", quoted(&names)),
                &format!("\"{}\"", names[0]),
            );
            return None;
        };
        if let Some(&(_, value)) = options.iter().find(|&&(name, _)| name == text) {
            return Some(value);
        }
        let hint = match closest(text, &names) {
            Some(suggestion) => format!("did you mean \"{suggestion}\"?"),
            None => format!("expected one of {}", quoted(&names)),
        };
        self.error(
            field.span(),
            format!("unknown value \"{text}\" for {}", field.what()),
            hint,
        );
        None
    }

    pub(super) fn path(&mut self, field: &Field<'_>, example: &str) -> Option<PathBuf> {
        self.non_empty_string(field, example).map(PathBuf::from)
    }

    pub(super) fn socket_address(&mut self, field: &Field<'_>) -> Option<SocketAddr> {
        let text = self.string(field)?;
        match text.trim().parse() {
            Ok(address) => Some(address),
            Err(_) => {
                self.error(
                    field.span(),
                    format!("{} is not an IP address and port: \"{text}\"", field.what()),
                    "write an IP address and a port, such as \"127.0.0.1:9477\" or \"[::]:9477\"",
                );
                None
            }
        }
    }

    /// Reports `name` if an earlier entry has it already; `seen` maps names to their first line.
    pub(super) fn unique(
        &mut self,
        field: &Field<'_>,
        name: &str,
        line: usize,
        seen: &mut HashMap<String, usize>,
        what: &str,
    ) {
        match seen.get(name) {
            Some(&first) => self.error(
                field.span(),
                format!("duplicate {what} `{name}`: already defined at line {first}"),
                format!("each {what} needs its own name: rename or remove one of them"),
            ),
            None => {
                seen.insert(name.to_owned(), line);
            }
        }
    }
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| format!("\"{name}\""))
        .collect::<Vec<_>>()
        .join(", ")
}
