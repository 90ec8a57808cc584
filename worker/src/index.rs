//! The full-text index behind `Search` (tantivy, on disk).
//!
//! One document per live text file version: space, node ID, path, version
//! and content. Index jobs from the front are applied idempotently (delete
//! by node ID, then add) and committed in batches; the commit payload
//! records the last applied job sequence and, per space, the last applied
//! revision, so a restarted worker resumes where it stopped and answers
//! which revision its results reflect.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tantivy::collector::TopDocs;
use tantivy::directory::MmapDirectory;
use tantivy::query::{BooleanQuery, Occur, Query, QueryParser, RegexQuery, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, STORED, STRING, Schema, TEXT, Value};
use tantivy::snippet::SnippetGenerator;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term, doc};

/// Memory for the index writer's buffer.
const WRITER_MEMORY: usize = 64 << 20;
/// Longest snippet, in characters.
const SNIPPET_CHARS: usize = 200;

/// What an index job does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOp {
    /// Index this file version, replacing any earlier document of the node.
    Upsert { path: String, version: u64, text: Option<String> },
    /// Drop the node's document.
    Delete,
    /// Drop every document of the space.
    DropSpace,
    /// Drop every document.
    DropAll,
}

/// One job, its content already fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub sequence: u64,
    pub space: String,
    pub revision: u64,
    pub node: String,
    pub op: JobOp,
}

/// A search hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub node: String,
    pub path: String,
    pub version: u64,
    pub score: f32,
    pub snippet: String,
    /// UTF-16 ranges within `snippet`.
    pub highlights: Vec<(u64, u64)>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Progress {
    sequence: u64,
    /// Last applied revision per space.
    spaces: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Copy)]
struct Fields {
    space: Field,
    node: Field,
    path: Field,
    /// The path as one token, for prefix filters.
    path_key: Field,
    version: Field,
    content: Field,
}

/// The worker's index; see the module docs.
pub struct SearchIndex {
    index: Index,
    /// The index's directory, for pruning its map cache (see `apply`).
    directory: MmapDirectory,
    reader: IndexReader,
    writer: Mutex<IndexWriter>,
    fields: Fields,
    progress: Mutex<Progress>,
    fresh: bool,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex").field("fresh", &self.fresh).finish_non_exhaustive()
    }
}

/// Why the index could not be used.
#[derive(Debug, thiserror::Error)]
#[error("search index: {0}")]
pub struct IndexError(String);

impl From<tantivy::TantivyError> for IndexError {
    fn from(error: tantivy::TantivyError) -> Self {
        IndexError(error.to_string())
    }
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let fields = Fields {
        space: builder.add_text_field("space", STRING | STORED),
        node: builder.add_text_field("node", STRING | STORED),
        path: builder.add_text_field("path", TEXT | STORED),
        path_key: builder.add_text_field("path_key", STRING),
        version: builder.add_u64_field("version", STORED),
        content: builder.add_text_field("content", TEXT | STORED),
    };
    (builder.build(), fields)
}

impl SearchIndex {
    /// Opens the index in `dir`, or creates an empty one (which reports
    /// itself fresh, so the front sends it everything).
    pub fn open(dir: &Path) -> Result<Self, IndexError> {
        std::fs::create_dir_all(dir).map_err(|e| IndexError(format!("{}: {e}", dir.display())))?;
        let (schema, fields) = schema();
        let mut directory = MmapDirectory::open(dir).map_err(|e| IndexError(e.to_string()))?;
        let index = match Index::open_or_create(directory.clone(), schema.clone()) {
            Ok(index) => index,
            Err(error) => {
                // An index of another layout (or a damaged one) holds nothing
                // the front cannot send again: start over, empty.
                tracing::warn!(%error, dir = %dir.display(), "search index unusable; starting a new one");
                std::fs::remove_dir_all(dir).map_err(|e| IndexError(format!("{}: {e}", dir.display())))?;
                std::fs::create_dir_all(dir).map_err(|e| IndexError(format!("{}: {e}", dir.display())))?;
                directory = MmapDirectory::open(dir).map_err(|e| IndexError(e.to_string()))?;
                Index::open_or_create(directory.clone(), schema)?
            }
        };
        let metas = index.load_metas()?;
        let fresh = metas.payload.is_none();
        let progress: Progress =
            metas.payload.as_deref().and_then(|p| serde_json::from_str(p).ok()).unwrap_or_default();
        let writer = index.writer_with_num_threads(1, WRITER_MEMORY)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        Ok(Self { index, directory, reader, writer: Mutex::new(writer), fields, progress: Mutex::new(progress), fresh })
    }

    /// Whether the index started empty (new or lost) this run.
    pub fn fresh(&self) -> bool {
        self.fresh
    }

    /// The last job sequence committed.
    pub fn committed(&self) -> u64 {
        lock(&self.progress).sequence
    }

    /// Applies jobs in order (those already applied are skipped) and
    /// commits them; returns the last committed sequence.
    pub fn apply(&self, jobs: Vec<Job>) -> Result<u64, IndexError> {
        let mut writer = lock(&self.writer);
        let mut progress = lock(&self.progress).clone();
        let f = self.fields;
        for job in jobs {
            // Sequence 0 marks rebuild jobs: always applied, position unchanged.
            if job.sequence != 0 && job.sequence <= progress.sequence {
                continue;
            }
            match job.op {
                JobOp::Upsert { path, version, text } => {
                    writer.delete_term(Term::from_field_text(f.node, &job.node));
                    if let Some(text) = text {
                        writer.add_document(doc!(
                            f.space => job.space.clone(),
                            f.node => job.node.clone(),
                            f.path_key => path.clone(),
                            f.path => path,
                            f.version => version,
                            f.content => text,
                        ))?;
                    }
                }
                JobOp::Delete => {
                    writer.delete_term(Term::from_field_text(f.node, &job.node));
                }
                JobOp::DropSpace => {
                    writer.delete_term(Term::from_field_text(f.space, &job.space));
                }
                JobOp::DropAll => {
                    writer.delete_all_documents()?;
                    progress.spaces.clear();
                    // Until the rebuild's marker moves it again, the index
                    // holds no job: a rebuild cut short (either side
                    // stopped, a connection dropped) reports position 0, so
                    // the front replays or rebuilds it, never trusting the
                    // position the dropped documents had.
                    progress.sequence = 0;
                }
            }
            if !job.space.is_empty() {
                let revision = progress.spaces.entry(job.space).or_default();
                *revision = (*revision).max(job.revision);
            }
            progress.sequence = progress.sequence.max(job.sequence);
        }
        let payload = serde_json::to_string(&progress).map_err(|e| IndexError(e.to_string()))?;
        fault_point!("index::before_commit");
        let mut commit = writer.prepare_commit()?;
        commit.set_payload(&payload);
        commit.commit()?;
        fault_point!("index::after_commit");
        self.reader.reload()?;
        // tantivy's directory keeps an entry for every file it ever mapped,
        // segments long merged away included, until its cache is listed:
        // with a segment or more per commit, a worker that runs for days
        // would grow without bound. Listing the live maps drops the rest.
        self.directory.get_cache_info();
        *lock(&self.progress) = progress.clone();
        Ok(progress.sequence)
    }

    /// Merges every segment into one, once the merges running end, and
    /// waits for it: the index at its smallest, the same however its
    /// background merges happened to run. For comparing its memory over
    /// time; commits do not need it.
    pub fn merge_all(&self) -> Result<(), IndexError> {
        let mut writer = lock(&self.writer);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let segments = self.index.searchable_segment_ids()?;
            if segments.len() <= 1 {
                break;
            }
            match writer.merge(&segments).wait() {
                Ok(_) => break,
                // A segment is still in a background merge: wait for it.
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                Err(error) => return Err(error.into()),
            }
        }
        self.reader.reload()?;
        Ok(())
    }

    /// Ranked hits for `query` within `space` (below `prefix`, a directory
    /// path), and the revision of that space the index reflects.
    pub fn search(
        &self,
        space: &str,
        prefix: &str,
        query: &str,
        limit: usize,
        offset: usize,
    ) -> Result<(Vec<Hit>, u64), IndexError> {
        let f = self.fields;
        let searcher = self.reader.searcher();
        let mut parser = QueryParser::for_index(&self.index, vec![f.content, f.path]);
        parser.set_conjunction_by_default();
        // Lenient: an agent's query never fails to parse; odd syntax is read as words.
        let (user_query, _) = parser.parse_query_lenient(query);
        // The space is a filter the server builds, never part of the query text.
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![
            (Occur::Must, Box::new(TermQuery::new(Term::from_field_text(f.space, space), IndexRecordOption::Basic))),
            (Occur::Must, user_query),
        ];
        let prefix = prefix.trim_end_matches('/');
        if !prefix.is_empty() {
            let pattern = format!("{}/.*", regex_syntax::escape(prefix));
            clauses.push((Occur::Must, Box::new(RegexQuery::from_pattern(&pattern, f.path_key)?)));
        }
        let scoped = BooleanQuery::new(clauses);
        let top = searcher.search(&scoped, &TopDocs::with_limit(limit.max(1)).and_offset(offset).order_by_score())?;
        let mut snippets = SnippetGenerator::create(&searcher, &scoped, f.content)?;
        snippets.set_max_num_chars(SNIPPET_CHARS);
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address)?;
            let text = |field| doc.get_first(field).and_then(|v| v.as_str()).unwrap_or("").to_owned();
            let snippet = snippets.snippet_from_doc(&doc);
            let fragment = snippet.fragment();
            let units = |byte: usize| fragment[..byte.min(fragment.len())].encode_utf16().count() as u64;
            hits.push(Hit {
                node: text(f.node),
                path: text(f.path),
                version: doc.get_first(f.version).and_then(|v| v.as_u64()).unwrap_or(0),
                score,
                snippet: fragment.to_owned(),
                highlights: snippet.highlighted().iter().map(|r| (units(r.start), units(r.end))).collect(),
            });
        }
        let revision = lock(&self.progress).spaces.get(space).copied().unwrap_or(0);
        Ok((hits, revision))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upsert(sequence: u64, space: &str, node: &str, text: &str) -> Job {
        Job {
            sequence,
            space: space.into(),
            revision: sequence,
            node: node.into(),
            op: JobOp::Upsert { path: format!("/{node}.md"), version: sequence, text: Some(text.into()) },
        }
    }

    #[test]
    fn jobs_apply_idempotently_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let index = SearchIndex::open(dir.path()).unwrap();
        assert!(index.fresh());
        index.apply(vec![upsert(1, "s", "a", "the quick brown fox"), upsert(2, "s", "b", "lazy dog")]).unwrap();
        // Replays and a newer version of the same node leave one document.
        index.apply(vec![upsert(1, "s", "a", "stale"), upsert(3, "s", "a", "the quick red fox")]).unwrap();
        let (hits, revision) = index.search("s", "/", "fox", 10, 0).unwrap();
        assert_eq!((hits.len(), revision), (1, 3));
        assert!(hits[0].snippet.contains("red"));
        assert_eq!(index.search("s", "/", "brown", 10, 0).unwrap().0.len(), 0);
        drop(index);

        let reopened = SearchIndex::open(dir.path()).unwrap();
        assert!(!reopened.fresh());
        assert_eq!(reopened.committed(), 3);
        assert_eq!(reopened.search("s", "/", "dog", 10, 0).unwrap().0[0].node, "b");
        assert!(reopened.search("s", "/elsewhere", "dog", 10, 0).unwrap().0.is_empty());
        assert_eq!(reopened.search("s", "/b.md", "dog", 10, 0).unwrap().0.len(), 0, "a file is not a folder");
    }

    #[test]
    fn a_rebuild_cut_short_reports_an_index_that_holds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let index = SearchIndex::open(dir.path()).unwrap();
        index.apply(vec![upsert(1, "s", "a", "alpha"), upsert(2, "s", "b", "beta")]).unwrap();
        let drop_all = Job { sequence: 0, space: String::new(), revision: 0, node: String::new(), op: JobOp::DropAll };
        // The rebuild drops everything and sends its first file; then it stops.
        index.apply(vec![drop_all]).unwrap();
        index.apply(vec![upsert(0, "s", "a", "alpha")]).unwrap();
        drop(index);
        let reopened = SearchIndex::open(dir.path()).unwrap();
        assert!(reopened.search("s", "/", "beta", 10, 0).unwrap().0.is_empty());
        assert_eq!(reopened.committed(), 0, "the position must not claim the dropped jobs");
        // Replaying the jobs brings the index back.
        reopened.apply(vec![upsert(1, "s", "a", "alpha"), upsert(2, "s", "b", "beta")]).unwrap();
        assert_eq!(reopened.search("s", "/", "beta", 10, 0).unwrap().0.len(), 1);
        assert_eq!(reopened.committed(), 2);
    }

    #[test]
    fn an_unusable_index_is_replaced_by_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("meta.json"), b"{ not an index").unwrap();
        let index = SearchIndex::open(dir.path()).unwrap();
        assert!(index.fresh());
    }

    #[test]
    fn spaces_never_see_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let index = SearchIndex::open(dir.path()).unwrap();
        index.apply(vec![upsert(1, "s", "a", "canary"), upsert(2, "t", "b", "canary")]).unwrap();
        let (hits, _) = index.search("s", "/", "canary", 10, 0).unwrap();
        assert_eq!(hits.iter().map(|h| h.node.as_str()).collect::<Vec<_>>(), ["a"]);
        // Naming another space in the query text cannot widen the filter.
        assert!(index.search("s", "/", "canary space:t", 10, 0).unwrap().0.is_empty());
        let drop = Job { sequence: 3, space: "s".into(), revision: 3, node: String::new(), op: JobOp::DropSpace };
        index.apply(vec![drop]).unwrap();
        assert!(index.search("s", "/", "canary", 10, 0).unwrap().0.is_empty());
        assert_eq!(index.search("t", "/", "canary", 10, 0).unwrap().0.len(), 1);
    }
}
