//! Prompt lookup (llama.cpp's `ngram-simple`): the last `n` tokens of a sequence, found
//! earlier in the same sequence (prompt and output so far), propose the tokens that followed
//! that earlier occurrence. Nothing is learned and nothing is stored: one backward scan over
//! the sequence's own tokens per proposal.

/// The guesses for what follows `tokens`: for `n` from `ngram_max` down to `ngram_min`, the
/// most recent earlier occurrence of the last `n` tokens (not the suffix itself) that has at
/// least one token after it gives up to `max` of the tokens that followed it. Empty when no
/// size matches (or `max` is 0, or `ngram_min` is 0). Longer matches are tried first: they
/// are the more specific context. Runs in O(len(tokens) * ngram_max).
pub fn propose(tokens: &[u32], ngram_min: usize, ngram_max: usize, max: usize) -> &[u32] {
    if max == 0 || ngram_min == 0 {
        return &[];
    }
    let len = tokens.len();
    for n in (ngram_min..=ngram_max).rev() {
        if n >= len {
            continue;
        }
        let suffix = &tokens[len - n..];
        // Candidate starts: the earlier occurrence ends before the suffix starts' last token,
        // so at least one token follows it. Scan from the most recent.
        for start in (0..len - n).rev() {
            if &tokens[start..start + n] == suffix {
                let from = start + n;
                let to = (from + max).min(len);
                return &tokens[from..to];
            }
        }
    }
    &[]
}

#[cfg(test)]
mod tests {
    use super::propose;

    #[test]
    fn the_longest_most_recent_match_proposes_what_followed() {
        // "1 2 3 4 5 ... 1 2 3" -> "4 5".
        let t = [1, 2, 3, 4, 5, 9, 1, 2, 3];
        assert_eq!(propose(&t, 1, 3, 2), &[4, 5]);
        assert_eq!(propose(&t, 1, 3, 10), &[4, 5, 9, 1, 2, 3]);
        // Two earlier occurrences of "7 8": the most recent wins.
        let t = [7, 8, 1, 7, 8, 2, 7, 8];
        assert_eq!(propose(&t, 2, 2, 1), &[2]);
    }

    #[test]
    fn a_longer_match_beats_a_more_recent_shorter_one() {
        // Suffix "5 6": "5 6" matches at 0 (followed by 1); "6" alone matches more recently at
        // 4 (followed by 2).
        let t = [5, 6, 1, 0, 6, 2, 5, 6];
        assert_eq!(propose(&t, 1, 2, 1), &[1]);
        assert_eq!(propose(&t, 1, 1, 1), &[2]);
    }

    #[test]
    fn nothing_to_propose() {
        assert!(propose(&[], 1, 3, 4).is_empty());
        assert!(propose(&[1, 2, 3], 1, 3, 4).is_empty());
        assert!(propose(&[1, 2, 1], 1, 3, 0).is_empty());
        assert!(propose(&[1, 2, 1], 0, 3, 4).is_empty());
        assert!(propose(&[1, 2, 1, 2], 3, 3, 4).is_empty());
        // The suffix itself is not a match: "1 1" at the end matches "1 1" at 0..2 only.
        assert_eq!(propose(&[1, 1, 1], 2, 2, 4), &[1]);
    }
}
