//! Compiled queries, kept by pattern and options.
//!
//! Every page of a grep carries the same pattern, so a worker compiles it
//! once per search rather than once per page. Compiled matchers are
//! immutable and cheap to clone (their state is shared), and the cache holds
//! a fixed number of them.

use std::num::NonZeroUsize;
use std::sync::{Mutex, PoisonError};

use lru::LruCache;

use crate::scan::{Options, PatternError, Query};

/// Queries kept at once.
const CAPACITY: NonZeroUsize = NonZeroUsize::new(64).expect("non-zero");

/// A bounded cache of compiled queries.
#[derive(Debug)]
pub struct QueryCache {
    compiled: Mutex<LruCache<(String, Options), Query>>,
}

impl Default for QueryCache {
    fn default() -> Self {
        Self { compiled: Mutex::new(LruCache::new(CAPACITY)) }
    }
}

impl QueryCache {
    /// The query if it was compiled before: a lookup, cheap enough for the
    /// async runtime.
    pub fn cached(&self, pattern: &str, options: Options) -> Option<Query> {
        let key = (pattern.to_owned(), options);
        self.compiled.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned()
    }

    /// Compiles the query and keeps it: can take milliseconds for a large
    /// pattern, so callers on the async runtime run it on a blocking thread.
    /// Patterns that fail to compile are not kept.
    pub fn compile(&self, pattern: &str, options: Options) -> Result<Query, PatternError> {
        let query = Query::new(pattern, options)?;
        self.compiled.lock().unwrap_or_else(PoisonError::into_inner).put((pattern.to_owned(), options), query.clone());
        Ok(query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::Mode;

    #[test]
    fn compiles_once_and_keeps_options_apart() {
        let cache = QueryCache::default();
        let options = Options {
            fixed_strings: false,
            case_insensitive: false,
            multiline: false,
            mode: Mode::Count,
            before_context: 0,
            after_context: 0,
        };
        let insensitive_options = Options { case_insensitive: true, ..options };
        assert!(cache.cached("ab", options).is_none());
        let exact = cache.compile("ab", options).unwrap();
        assert!(cache.cached("ab", insensitive_options).is_none(), "options are part of the key");
        let insensitive = cache.compile("ab", insensitive_options).unwrap();
        let text = b"AB\nab\n";
        let count = |q: &Query| q.scanner().scan(text, 0, 0).count;
        assert_eq!((count(&exact), count(&insensitive)), (1, 2));
        assert_eq!(count(&cache.cached("ab", options).unwrap()), 1);
        assert!(cache.compile("(a", options).is_err());
        assert!(cache.cached("(a", options).is_none(), "a pattern that fails is not kept");
    }
}
