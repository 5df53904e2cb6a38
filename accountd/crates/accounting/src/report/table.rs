//! The text tables of every report (`report teams`, `report fairshare`, `report jobs`,
//! `report utilisation`, `report users`): columns as wide as their widest cell, two spaces apart, no trailing
//! blanks.

use std::fmt::Write as _;

/// A table: the header line, then `lines`, each a row of cells under the header's columns.
/// The first `left` columns are left-aligned, the others right-aligned; a rule of dashes, as
/// wide as each column, comes before line `rule_before`.
pub fn render<H: AsRef<str>>(
    header: &[H],
    lines: &[Vec<String>],
    left: usize,
    rule_before: Option<usize>,
) -> String {
    render_aligned(header, lines, |i| i < left, rule_before)
}

/// [`render`], with the columns `is_left(i)` says left-aligned (text, such as a list of jobs
/// in the last column), the others right-aligned.
pub fn render_aligned<H: AsRef<str>>(
    header: &[H],
    lines: &[Vec<String>],
    is_left: impl Fn(usize) -> bool,
    rule_before: Option<usize>,
) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.as_ref().chars().count()).collect();
    for line in lines {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut push = |cells: &mut dyn Iterator<Item = &str>| {
        let start = out.len();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            let _ = if is_left(i) {
                write!(out, "{cell:<w$}")
            } else {
                write!(out, "{cell:>w$}")
            };
        }
        let end = start + out[start..].trim_end().len();
        out.truncate(end);
        out.push('\n');
    };
    push(&mut header.iter().map(AsRef::as_ref));
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    for (i, line) in lines.iter().enumerate() {
        if rule_before == Some(i) {
            push(&mut rule.iter().map(String::as_str));
        }
        push(&mut line.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_their_widest_cell_and_lines_have_no_trailing_blanks() {
        let lines = vec![
            vec!["a".to_string(), "x".into(), "1".into(), String::new()],
            vec!["été".to_string(), "yy".into(), "22".into(), "3".into()],
        ];
        assert_eq!(
            render(&["TEAM", "T", "N", "M"], &lines, 1, None),
            "TEAM   T   N  M\na      x   1\nété   yy  22  3\n"
        );
        assert_eq!(
            render(&["TEAM", "T", "N", "M"], &lines, 2, Some(1)),
            "TEAM  T    N  M\na     x    1\n----  --  --  -\nété   yy  22  3\n"
        );
    }
}
