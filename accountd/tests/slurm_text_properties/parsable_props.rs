//! parsable: the splitter every reader uses.

use super::*;

proptest! {
    #![proptest_config(config(256))]

    /// `fields` agrees with a split of the line on `|` for each shape, whatever the line, and
    /// a field count error counts the fields there are.
    #[test]
    fn fields_match_a_plain_split(line in junk(), n in 0usize..4) {
        let pieces: Vec<&str> = line.split('|').collect();
        match n {
            0 => check_fields::<1>(&line, &pieces),
            1 => check_fields::<2>(&line, &pieces),
            2 => check_fields::<5>(&line, &pieces),
            _ => check_fields::<24>(&line, &pieces),
        }
    }

    /// Fields written without `|` are read back as written, in every shape.
    #[test]
    fn written_fields_read_back(f in vec("[^|]{0,12}", 3), rest in "[^\n]{0,20}") {
        let line = f.join("|");
        let read: [&str; 3] = parsable::fields(&line, Shape::Exactly).unwrap();
        prop_assert_eq!(read.to_vec(), f.clone());
        let read: [&str; 3] = parsable::fields(&line, Shape::Leading).unwrap();
        prop_assert_eq!(read.to_vec(), f.clone());
        // The last field of `Rest` is all that follows, separators included.
        let longer = format!("{line}|{rest}");
        let read: [&str; 3] = parsable::fields(&longer, Shape::Rest).unwrap();
        prop_assert_eq!(&read[..2], &f[..2]);
        prop_assert_eq!(read[2].to_string(), format!("{}|{rest}", f[2]));
    }

    /// `lines` gives every non-blank line with its true number, and nothing else.
    #[test]
    fn lines_keep_their_numbers(text in soup()) {
        let got: Vec<(usize, &str)> = parsable::lines(&text).collect();
        prop_assert_eq!(got, non_blank(&text));
    }

    /// A malformed line keeps at most [`parsable::TEXT_LIMIT`] characters of the line, cut at
    /// a character (never inside one), `…` marking a cut.
    #[test]
    fn malformed_lines_keep_a_bounded_prefix(line in junk(), extra in "[^\n]{0,400}") {
        let line = format!("{line}{extra}");
        let m = MalformedLine::new("squeue", 3, "bad", &line);
        let kept = m.content.strip_suffix('…').unwrap_or(&m.content);
        prop_assert!(line.starts_with(kept));
        prop_assert!(kept.chars().count() <= parsable::TEXT_LIMIT);
        prop_assert_eq!(
            m.content.ends_with('…') && kept.len() < line.len(),
            line.chars().count() > parsable::TEXT_LIMIT
        );
        prop_assert!(m.to_string().starts_with("squeue line 3: bad: `"));
    }
}

pub(crate) fn check_fields<const N: usize>(line: &str, pieces: &[&str]) {
    let exactly = parsable::fields::<N>(line, Shape::Exactly);
    if pieces.len() == N {
        assert_eq!(exactly.unwrap().to_vec(), pieces);
    } else {
        let e = exactly.unwrap_err();
        assert_eq!((e.expected, e.at_least, e.found), (N, false, pieces.len()));
    }
    let leading = parsable::fields::<N>(line, Shape::Leading);
    let rest = parsable::fields::<N>(line, Shape::Rest);
    if pieces.len() >= N {
        assert_eq!(leading.unwrap().to_vec(), &pieces[..N]);
        let rest = rest.unwrap();
        assert_eq!(&rest[..N - 1], &pieces[..N - 1]);
        assert_eq!(rest.join("|"), line);
    } else {
        for e in [leading.unwrap_err(), rest.unwrap_err()] {
            assert_eq!((e.expected, e.at_least, e.found), (N, true, pieces.len()));
        }
    }
}
