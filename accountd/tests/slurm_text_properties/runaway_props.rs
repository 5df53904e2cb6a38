//! The runaway check's job ids (`squeue -h -o %A`).

use super::*;

proptest! {
    #![proptest_config(config(512))]

    /// Ids written one a line (blank lines and spaces anywhere) read back as the same set; a
    /// line that is not an id fails the whole list and is named; nothing panics.
    #[test]
    fn job_ids_read_back_or_fail_whole(
        ids in vec(any::<u64>(), 0..20),
        pads in vec(("[ \t]{0,2}", "[ \t]{0,2}", any::<bool>()), 20),
        bad in prop::option::of(("[^\n\r]{1,30}", any::<prop::sample::Index>())),
        junk in any::<String>(),
    ) {
        let mut lines: Vec<String> = ids
            .iter()
            .zip(&pads)
            .map(|(id, (a, b, blank))| format!("{a}{id}{b}{}", if *blank { "\n" } else { "" }))
            .collect();
        let want: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
        let bad = bad.filter(|(b, _)| b.trim().parse::<u64>().is_err() && !b.trim().is_empty());
        if let Some((b, at)) = &bad {
            lines.insert(at.index(lines.len() + 1), b.clone());
        }
        let text = lines.join("\n");
        match (ingest::parse_job_ids(&text), bad) {
            (Ok(got), None) => prop_assert_eq!(got, want),
            (Err(e), Some((b, _))) => {
                let named: String = b.trim().chars().take(200).collect();
                prop_assert!(e.to_string().contains(&format!("`{named}`")), "{}", e);
            }
            (got, bad) => prop_assert!(false, "{:?} for {:?} in {:?}", got, bad, text),
        }
        let _ = ingest::parse_job_ids(&junk);
    }
}
