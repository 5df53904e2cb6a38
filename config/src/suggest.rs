//! "Did you mean ...?" for misspelt keys and values.

/// The known word closest to `word`, if it is close enough to be a likely typo or a shortening
/// (`rate` for `rate_per_hour`).
pub(crate) fn closest<'k>(word: &str, known: &[&'k str]) -> Option<&'k str> {
    let word = word.to_lowercase();
    let typo = known
        .iter()
        .map(|&candidate| (edit_distance(&word, candidate), candidate))
        .filter(|&(distance, candidate)| distance <= (candidate.chars().count() / 3).clamp(1, 3))
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, candidate)| candidate);
    typo.or_else(|| {
        let shortened =
            |candidate: &&str| word.chars().count() >= 3 && candidate.starts_with(&word);
        let mut prefixed = known.iter().copied().filter(shortened);
        // Only an unambiguous shortening is a suggestion.
        match (prefixed.next(), prefixed.next()) {
            (Some(candidate), None) => Some(candidate),
            _ => None,
        }
    })
}

/// Levenshtein distance, counted in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        current[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance() {
        assert_eq!(edit_distance("quota", "quota"), 0);
        assert_eq!(edit_distance("quotaa", "quota"), 1);
        assert_eq!(edit_distance("borow_limit", "borrow_limit"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn suggests_only_close_words() {
        let known = [
            "name",
            "quota",
            "borrow_limit",
            "lend",
            "lend_limit",
            "weight",
        ];
        assert_eq!(closest("quotaa", &known), Some("quota"));
        assert_eq!(closest("Weight", &known), Some("weight"));
        assert_eq!(closest("lend_limt", &known), Some("lend_limit"));
        assert_eq!(closest("colour", &known), None);
        assert_eq!(closest("borrow", &known), Some("borrow_limit"));
        assert_eq!(
            closest("idle", &["idle_cost_split", "idle_threshold_percent"]),
            None,
            "ambiguous"
        );
        assert_eq!(closest("rate", &["rate_per_hour"]), Some("rate_per_hour"));
        assert_eq!(
            closest("fairshare", &["fair-share", "fifo"]),
            Some("fair-share")
        );
    }
}
