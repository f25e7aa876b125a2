//! Invented proper names, built from syllables and unique across the whole corpus.

use std::collections::HashSet;

use crate::rng::Dice;

/// Syllables chosen to give names that read as names but are not common words.
const SYLLABLES: &[&str] = &[
    "va", "ro", "ka", "te", "lu", "vi", "os", "mar", "de", "ke", "thal", "bre", "ni", "sko", "run",
    "ve", "ya", "dor", "quin", "zel", "ha", "mo", "ri", "tav", "ek", "lin", "sa", "ul", "fen",
    "dra", "go", "ith", "ny", "pel", "cor", "ba", "ze", "lo", "mir", "tu", "has", "vor", "ael",
    "el", "ska", "ren", "dul", "ob", "wy", "ste", "ga", "nor", "vey", "ur", "kes", "ma", "li",
    "dro", "ast", "jo", "brin", "tor", "ev", "ilk", "rau", "sen", "gwe", "oth", "pha", "kiv", "ud",
    "zan", "hol", "ar", "be", "tei", "vu", "ors", "qua", "lem", "ris", "am",
];

fn is_vowel(c: u8) -> bool {
    matches!(c, b'a' | b'e' | b'i' | b'o' | b'u' | b'y')
}

/// Syllables rare in English words and names; every name has at least one, which keeps
/// names like "Oslo" (os-lo) or "Tudor" (tu-dor) from being generated.
const RARE: &[&str] = &[
    "va", "vi", "ve", "zel", "ze", "zan", "kiv", "vor", "vey", "vu", "quin", "qua", "wy", "gwe",
    "ael", "ilk", "ith", "ny", "sko", "ska", "thal", "oth", "pha", "rau", "kes", "ek", "ud", "ors",
    "tei", "tav", "ev", "jo", "ob", "dul",
];

/// Rejects hard-to-read joins: three vowels or four consonants in a row, or a doubled letter.
fn readable(w: &str) -> bool {
    let b = w.as_bytes();
    let (mut vowels, mut consonants) = (0, 0);
    for (i, &c) in b.iter().enumerate() {
        if is_vowel(c) {
            vowels += 1;
            consonants = 0;
        } else {
            consonants += 1;
            vowels = 0;
        }
        if vowels >= 3 || consonants >= 4 {
            return false;
        }
        if i >= 1 && b[i - 1] == c {
            return false;
        }
    }
    true
}

fn capitalise(w: &str) -> String {
    let mut c = w.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Hands out words that were never handed out before (in any category).
#[derive(Default)]
pub(crate) struct Namer {
    used: HashSet<String>,
}

impl Namer {
    /// A fresh capitalised word of `min..=max` syllables.
    pub(crate) fn word(&mut self, dice: &mut Dice, min: u32, max: u32) -> String {
        let mut extra = 0;
        let mut attempts = 0;
        loop {
            let n = dice.range(min, max) + extra;
            let mut w = String::new();
            let mut rare = false;
            for _ in 0..n {
                let s = *dice.pick(SYLLABLES);
                rare |= RARE.contains(&s);
                w.push_str(s);
            }
            if rare && w.len() >= 4 && w.len() <= 9 + 3 * extra as usize && readable(&w) {
                let w = capitalise(&w);
                if self.used.insert(w.clone()) {
                    return w;
                }
            }
            attempts += 1;
            if attempts % 200 == 0 {
                // The space of short names is getting crowded: allow longer ones.
                extra += 1;
            }
        }
    }

    /// Reserves a multi-word name (e.g. a person's full name); false if already taken.
    pub(crate) fn claim(&mut self, name: &str) -> bool {
        self.used.insert(name.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Stream;

    #[test]
    fn names_are_unique_readable_and_contain_a_rare_syllable() {
        let mut dice = Dice::new(1, Stream::World);
        let mut namer = Namer::default();
        let words: Vec<String> = (0..20_000).map(|_| namer.word(&mut dice, 2, 3)).collect();
        let set: HashSet<&String> = words.iter().collect();
        assert_eq!(set.len(), words.len());
        for w in &words {
            let lower = w.to_lowercase();
            assert!(readable(&lower), "{w}");
            assert!(w.chars().next().unwrap().is_uppercase());
            assert!(RARE.iter().any(|r| lower.contains(r)), "{w}");
        }
        assert!(!namer.claim(&words[0]));
    }
}
