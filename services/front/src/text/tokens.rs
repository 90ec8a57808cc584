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

use bpe_openai::Tokenizer as Bpe;

use crate::error::{Error, Result};

/// Bytes a token holds in text that [`Tokenizer::prefix_within`] expects to
/// fit its budget whole.
const LIKELY_BYTES_PER_TOKEN: u64 = 4;

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

    /// Tokens of `text`.
    pub fn count(self, text: &str) -> u64 {
        self.bpe().count(text) as u64
    }

    /// The longest prefix of `text` within `budget` tokens that ends at a
    /// line end, or, when not even the first line fits, the longest prefix of
    /// that line that does (at a character boundary): its length in bytes
    /// and its tokens. Tokens can span a line break (a run of blank lines is
    /// one), so a prefix's count is the count of its text, not a sum.
    pub fn prefix_within(self, text: &str, budget: u64) -> (usize, u64) {
        let bpe = self.bpe();
        let count = |end: usize| bpe.count(&text[..end]) as u64;
        // Text this short likely fits (English runs about four bytes a
        // token): one count of it all then decides.
        if text.len() as u64 <= budget.saturating_mul(LIKELY_BYTES_PER_TOKEN) {
            let tokens = count(text.len());
            if tokens <= budget {
                return (text.len(), tokens);
            }
        }
        // Line ends, and the longest run of lines their summed counts allow.
        let mut ends = Vec::new();
        let mut sum = 0u64;
        let mut at = 0;
        for line in text.split_inclusive('\n') {
            sum += bpe.count(line) as u64;
            if sum > budget {
                break;
            }
            at += line.len();
            ends.push(at);
        }
        // The sum is near the true count; step back while the true count is over.
        while let Some(&end) = ends.last() {
            let tokens = count(end);
            if tokens <= budget {
                return (end, tokens);
            }
            ends.pop();
        }
        // Inside the first line: the longest prefix that fits, by bisection
        // over its character boundaries (checked: a count can fall as text grows).
        let line = text.find('\n').map_or(text.len(), |at| at + 1);
        let ends: Vec<usize> = text[..line].char_indices().map(|(at, c)| at + c.len_utf8()).collect();
        let mut fitting = ends.partition_point(|&end| count(end) <= budget);
        while fitting > 0 && count(ends[fitting - 1]) > budget {
            fitting -= 1;
        }
        let fits = fitting.checked_sub(1).map_or(0, |last| ends[last]);
        (fits, count(fits))
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
    /// (`None` for no budget), named `prefix`… in errors.
    pub fn parse(prefix: &str, max_tokens: u64, tokenizer: &str) -> Result<Option<Self>> {
        let Some(tokenizer) = Tokenizer::for_name(tokenizer) else {
            return Err(Error::invalid_argument(
                &format!("{prefix}tokenizer"),
                format!("Unknown tokenizer {tokenizer:?}; use o200k_base (the default) or cl100k_base."),
            ));
        };
        match max_tokens {
            0 => Ok(None),
            max if max < MIN_MAX_TOKENS => Err(Error::invalid_argument(
                &format!("{prefix}max_tokens"),
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
    fn a_first_line_over_the_budget_is_cut_at_a_character() {
        let text = "日本語のテキストはトークンが多い。".repeat(20) + "\nnext\n";
        let (fits, tokens) = Tokenizer::O200kBase.prefix_within(&text, 7);
        assert!(fits > 0 && fits < text.find('\n').unwrap(), "{fits}");
        assert!(tokens <= 7 && tokens == Tokenizer::O200kBase.count(&text[..fits]));
        assert!(Tokenizer::O200kBase.count(&text[..fits + text[fits..].chars().next().unwrap().len_utf8()]) > 7);
    }
}
