//! The CSV and JSON of every report: each report's rows are one serde type, whose fields are
//! its CSV columns and its JSON keys.

use serde::Serialize;

/// How the numbers of a report's rows are written. Each report has one row type, generic over
/// this, whose fields are its CSV columns and its JSON keys, in order (the teams report's JSON
/// nests each row's GPU types, which its CSV gives lines of their own: `teams::export::TeamsCsvLine`).
/// JSON ([`JsonNumbers`]) carries the numbers as they are, CSV ([`CsvNumbers`]) as text with the
/// digits the report has always given them.
pub(crate) trait Numbers {
    type Number: Serialize + Default;
    /// `value` to `digits` decimals in CSV (None: as Rust prints an f64, `0.25`, `1`).
    fn number(value: f64, digits: Option<usize>) -> Self::Number;
}

/// The numbers of JSON rows: full precision.
#[derive(Debug, Default)]
pub(crate) struct JsonNumbers;

impl Numbers for JsonNumbers {
    type Number = f64;
    fn number(value: f64, _digits: Option<usize>) -> f64 {
        value
    }
}

/// The numbers of CSV rows: [`CsvNumber`].
#[derive(Debug, Default)]
pub(crate) struct CsvNumbers;

impl Numbers for CsvNumbers {
    type Number = CsvNumber;
    fn number(value: f64, digits: Option<usize>) -> CsvNumber {
        CsvNumber { value, digits }
    }
}

/// A number in a CSV field: to `digits` decimals (`10.0000`), or as Rust prints it without.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CsvNumber {
    value: f64,
    digits: Option<usize>,
}

impl Serialize for CsvNumber {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.digits {
            Some(digits) => serializer.collect_str(&format_args!("{:.*}", digits, self.value)),
            None => serializer.collect_str(&self.value),
        }
    }
}

/// Rows as CSV: a header line of the row type's field names, then a line per row, each ended by
/// `\n`, a field quoted (RFC 4180) where it holds a comma, a quote or a line break. Without rows,
/// the header alone (taken from `R::default()`).
pub fn csv_text<R: Serialize + Default>(rows: impl IntoIterator<Item = R>) -> String {
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    let mut header_only = true;
    for row in rows {
        writer.serialize(row).expect("report rows serialise");
        header_only = false;
    }
    if header_only {
        writer
            .serialize(R::default())
            .expect("report rows serialise");
    }
    let mut bytes = writer.into_inner().expect("writing to memory cannot fail");
    if header_only {
        // Field names hold no line break.
        let header = bytes.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
        bytes.truncate(header);
    }
    String::from_utf8(bytes).expect("the fields are UTF-8")
}

/// Rows as a pretty-printed JSON array, with a final newline.
pub(crate) fn json_text<R: Serialize>(rows: &[R]) -> String {
    let mut s = serde_json::to_string_pretty(rows).expect("plain data serialises");
    s.push('\n');
    s
}
