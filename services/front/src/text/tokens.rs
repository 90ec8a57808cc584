//! Budgets in tokens, the unit models count their context in.
//!
//! Counted with the OpenAI vocabularies by GitHub's linear-time byte-pair
//! encoder (`bpe-openai`), which gives the token IDs tiktoken gives, and is
//! faster than tiktoken's port to Rust (`tiktoken-rs`). Tokens are counted only
//! for what a reply returns, which the UTF-16 and line budgets bound first.
//!
//! ```
//! use agentvfs_front::text::tokens::Tokenizer;
//!
//! assert_eq!(Tokenizer::O200kBase.count("hello world"), 2);
//! // Three tokens a line: five tokens hold one whole line.
//! let (fits, tokens) = Tokenizer::O200kBase.prefix_within("one two\nthree four\nfive\n", 5);
//! assert_eq!((fits, tokens), ("one two\n".len(), 3));
//! ```

use std::collections::HashMap;

use bpe_openai::Tokenizer as Bpe;

use crate::error::{Error, Result};

/// Bytes a token holds in text that [`Tokenizer::prefix_within`] expects to
/// fit its budget whole.
const LIKELY_BYTES_PER_TOKEN: u64 = 4;

/// The least text [`Tokenizer::count`] counts in parts on several cores, a
/// part per this many bytes (about a millisecond of counting).
const PARALLEL_BYTES: usize = 32 << 10;

/// The cores counts can run on.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// A vocabulary to count tokens in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tokenizer {
    /// GPT-4o and later.
    #[default]
    O200kBase,
    /// GPT-4 and GPT-3.5.
    Cl100kBase,
}

impl Tokenizer {
    /// The tokenizer a request names: `o200k_base` (also the default, for
    /// an empty name) or `cl100k_base`.
    pub fn for_name(name: &str) -> Option<Self> {
        match name {
            "" | "o200k_base" => Some(Self::O200kBase),
            "cl100k_base" => Some(Self::Cl100kBase),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::O200kBase => "o200k_base",
            Self::Cl100kBase => "cl100k_base",
        }
    }

    fn bpe(self) -> &'static Bpe {
        match self {
            Self::O200kBase => bpe_openai::o200k_base(),
            Self::Cl100kBase => bpe_openai::cl100k_base(),
        }
    }

    /// Tokens of `text`. A long text is counted in parts on every core.
    pub fn count(self, text: &str) -> u64 {
        self.count_in_parts(text, cores().min(text.len() / PARALLEL_BYTES))
    }

    /// Tokens of `text`, counted in about `parts` parts at once. A part ends
    /// where no token can span the cut: after a line break followed by a
    /// character that is neither white space nor `/` (the pieces the
    /// vocabulary is applied to end at such a line break or before it,
    /// but for punctuation with line breaks and slashes after it in
    /// `o200k_base`), so the parts' counts add up to the whole's.
    fn count_in_parts(self, text: &str, parts: usize) -> u64 {
        if parts < 2 {
            return self.counter().count(text);
        }
        let mut cuts = vec![0];
        for part in 1..parts {
            let from = (text.len() * part / parts).max(*cuts.last().unwrap_or(&0));
            let after_break = text.as_bytes()[from..].iter().enumerate().filter(|(_, b)| **b == b'\n');
            let cut = after_break
                .map(|(at, _)| from + at + 1)
                .find(|&at| text[at..].chars().next().is_some_and(|next| !next.is_whitespace() && next != '/'));
            if let Some(at) = cut {
                cuts.push(at);
            }
        }
        cuts.push(text.len());
        std::thread::scope(|scope| {
            let counts: Vec<_> = cuts
                .windows(2)
                .map(|part| scope.spawn(move || self.counter().count(&text[part[0]..part[1]])))
                .collect();
            counts.into_iter().map(|count| count.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).sum()
        })
    }

    /// A [`Counter`] for several texts, or parts of one.
    pub fn counter<'t>(self) -> Counter<'t> {
        Counter { bpe: self.bpe(), known: HashMap::new() }
    }

    /// The longest prefix of `text` within `budget` tokens that ends at a
    /// line end, or, when not even the first line fits, the longest prefix of
    /// that line that does (at a character boundary): its length in bytes
    /// and its tokens. Tokens can span a line break (a run of blank lines is
    /// one), so a prefix's count is the count of its text, not a sum.
    pub fn prefix_within(self, text: &str, budget: u64) -> (usize, u64) {
        let mut counter = self.counter();
        // Text this short likely fits (English runs about four bytes a
        // token): one count of it all then decides.
        if text.len() as u64 <= budget.saturating_mul(LIKELY_BYTES_PER_TOKEN) {
            let tokens = self.count(text);
            if tokens <= budget {
                return (text.len(), tokens);
            }
        }
        // Line ends, and the longest run of lines their summed counts allow.
        let mut ends = Vec::new();
        let mut sum = 0u64;
        let mut at = 0;
        for line in text.split_inclusive('\n') {
            sum += counter.count(line);
            if sum > budget {
                break;
            }
            at += line.len();
            ends.push(at);
        }
        // The sum is near the true count; step back while the true count is over.
        while let Some(&end) = ends.last() {
            let tokens = counter.count(&text[..end]);
            if tokens <= budget {
                return (end, tokens);
            }
            ends.pop();
        }
        // Inside the first line: the longest prefix that fits, by bisection
        // over its character boundaries (checked: a count can fall as text grows).
        let line = text.find('\n').map_or(text.len(), |at| at + 1);
        let ends: Vec<usize> = text[..line].char_indices().map(|(at, c)| at + c.len_utf8()).collect();
        let mut fitting = ends.partition_point(|&end| counter.count(&text[..end]) <= budget);
        while fitting > 0 && counter.count(&text[..ends[fitting - 1]]) > budget {
            fitting -= 1;
        }
        let fits = fitting.checked_sub(1).map_or(0, |last| ends[last]);
        (fits, counter.count(&text[..fits]))
    }
}

/// Counts tokens of texts that share their words, the pieces of text the
/// vocabulary is applied to one by one (a word, a run of spaces, a line
/// break, a number): each distinct piece is encoded once, then looked up.
/// Source text repeats its words so much that this halves the time a count
/// of this repository's sources takes (1.25 million tokens in 5 MB: 155–199
/// ms encoded piece by piece, 94–96 ms with each distinct piece encoded
/// once), with the same counts: a text's tokens are the sum of its pieces'.
pub struct Counter<'t> {
    bpe: &'static Bpe,
    known: HashMap<&'t str, u64>,
}

impl std::fmt::Debug for Counter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counter").field("known", &self.known.len()).finish_non_exhaustive()
    }
}

impl<'t> Counter<'t> {
    /// Tokens of `text`.
    pub fn count(&mut self, text: &'t str) -> u64 {
        let (bpe, known) = (self.bpe, &mut self.known);
        let mut tokens = 0;
        for piece in bpe.split(text) {
            tokens += *known.entry(piece).or_insert_with(|| bpe.bpe.count(piece.as_bytes()) as u64);
        }
        tokens
    }
}

/// The smallest budget in tokens: room for any one character.
pub const MIN_MAX_TOKENS: u64 = 4;

/// A budget in tokens of a tokenizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBudget {
    pub tokenizer: Tokenizer,
    pub max: u64,
}

impl TokenBudget {
    /// The budget of a request's `max_tokens` and `tokenizer` fields
    /// (`None` for no budget).
    pub fn parse(max_tokens: u64, tokenizer: &str) -> Result<Option<Self>> {
        let Some(tokenizer) = Tokenizer::for_name(tokenizer) else {
            return Err(Error::invalid_argument(
                "tokenizer",
                format!("Unknown tokenizer {tokenizer:?}; use o200k_base (the default) or cl100k_base."),
            ));
        };
        match max_tokens {
            0 => Ok(None),
            max if max < MIN_MAX_TOKENS => Err(Error::invalid_argument(
                "max_tokens",
                format!("max_tokens must be 0 (no budget) or at least {MIN_MAX_TOKENS}, not {max}."),
            )
            .with("limit", MIN_MAX_TOKENS)),
            max => Ok(Some(Self { tokenizer, max })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors published with OpenAI's tiktoken (its tests and README).
    #[test]
    fn counts_match_the_reference_tokenizer() {
        assert_eq!(Tokenizer::O200kBase.bpe().encode("hello world"), [24912, 2375]);
        assert_eq!(Tokenizer::Cl100kBase.bpe().encode("hello world"), [15339, 1917]);
        assert_eq!(Tokenizer::for_name(""), Some(Tokenizer::O200kBase));
        assert_eq!(Tokenizer::for_name("p50k_base"), None);
    }

    #[test]
    fn a_long_text_counted_in_parts_counts_as_a_whole() {
        let sources = [include_str!("tokens.rs"), include_str!("encoding.rs"), include_str!("../text.rs")].concat();
        let text = format!("{sources}\n\n\u{3000}indented 日本語\n \n\t\n}}\n// a comment\n/* more */\n").repeat(8);
        assert!(text.len() > 4 * PARALLEL_BYTES);
        for tokenizer in [Tokenizer::O200kBase, Tokenizer::Cl100kBase] {
            let whole = tokenizer.bpe().count(&text) as u64;
            assert_eq!(tokenizer.count(&text), whole, "{tokenizer:?}");
            for parts in 2..64 {
                assert_eq!(tokenizer.count_in_parts(&text, parts), whole, "{tokenizer:?} in {parts} parts");
            }
        }
    }

    #[test]
    fn a_counter_counts_as_the_encoder_does() {
        let texts = [include_str!("tokens.rs"), include_str!("encoding.rs"), "日本語\n\n\n   x\r\n\t 😀 123456"];
        for tokenizer in [Tokenizer::O200kBase, Tokenizer::Cl100kBase] {
            let mut counter = tokenizer.counter();
            for text in texts {
                assert_eq!(counter.count(text), tokenizer.bpe().count(text) as u64, "{tokenizer:?}");
            }
        }
    }

    #[test]
    fn a_first_line_over_the_budget_is_cut_at_a_character() {
        let text = "日本語のテキストはトークンが多い。".repeat(20) + "\nnext\n";
        let (fits, tokens) = Tokenizer::O200kBase.prefix_within(&text, 7);
        assert!(fits > 0 && fits < text.find('\n').unwrap(), "{fits}");
        assert!(tokens <= 7 && tokens == Tokenizer::O200kBase.count(&text[..fits]));
        assert!(Tokenizer::O200kBase.count(&text[..fits + text[fits..].chars().next().unwrap().len_utf8()]) > 7);
    }
}
