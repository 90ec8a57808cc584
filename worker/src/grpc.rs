//! The `Worker` service: grep jobs from the front.

use std::collections::HashMap;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::worker_server::Worker;
use prost::bytes::Bytes;
use tonic::{Request, Response, Status};

use std::sync::Arc;

use crate::error::Error;
use crate::fetch::Fetcher;
use crate::index::{Job, JobOp, SearchIndex};
use crate::job::{self, Bounds, JobEntry, JobFile};
use crate::queries::QueryCache;
use crate::scan::{Hit, Line, Mode, Options};

/// Serves grep jobs and the search index.
#[derive(Debug, Clone)]
pub struct WorkerService {
    fetcher: Fetcher,
    index: Arc<SearchIndex>,
    queries: Arc<QueryCache>,
}

impl WorkerService {
    pub fn new(fetcher: Fetcher, index: Arc<SearchIndex>) -> Self {
        Self { fetcher, index, queries: Arc::default() }
    }
}

#[tonic::async_trait]
impl Worker for WorkerService {
    async fn run_grep(&self, request: Request<pb::GrepJob>) -> Result<Response<pb::GrepJobResult>, Status> {
        let job = request.into_inner();
        let mode = match pb::GrepOutputMode::try_from(job.output_mode) {
            Ok(pb::GrepOutputMode::FilesWithMatches) => Mode::FilesWithMatches,
            Ok(pb::GrepOutputMode::Content) => Mode::Content,
            Ok(pb::GrepOutputMode::Count) => Mode::Count,
            Err(_) => {
                let message = "Unknown output mode.".to_owned();
                return Err(Error::InvalidArgument { field: "output_mode", message }.into());
            }
        };
        let options = Options {
            fixed_strings: job.fixed_strings,
            case_insensitive: job.case_insensitive,
            multiline: job.multiline,
            mode,
            before_context: job.before_context as usize,
            after_context: job.after_context as usize,
        };
        let query = match self.queries.cached(&job.pattern, options) {
            Some(query) => query,
            None => {
                let (queries, pattern) = (self.queries.clone(), job.pattern.clone());
                tokio::task::spawn_blocking(move || queries.compile(&pattern, options))
                    .await
                    .map_err(|e| Error::Internal(format!("pattern task failed: {e}")))?
                    .map_err(|e| Error::InvalidPattern(e.to_string()))?
            }
        };
        let bounds = Bounds {
            resume_after_line: job.resume_after_line,
            max_entries: if job.max_entries == 0 {
                usize::MAX
            } else {
                usize::try_from(job.max_entries).unwrap_or(usize::MAX)
            },
            skip_entries: job.skip_entries,
            max_output_bytes: match job.max_output_bytes {
                0 => usize::MAX,
                n => usize::try_from(n).unwrap_or(usize::MAX),
            },
        };
        // A worker that cannot fetch content fails the job (the front tries
        // another worker) instead of reporting every file as skipped.
        let (contents, fetched) = self
            .fetcher
            .fetch_counted(job.files.iter().map(|f| f.hash.clone()).collect())
            .await
            .map_err(Error::from)?;
        if !job.prefetch.is_empty() {
            self.fetcher.prefetch(job.prefetch.clone());
        }
        let encodings: Vec<String> = job.files.iter().map(|f| f.encoding.clone()).collect();
        let started = std::time::Instant::now();
        let result = tokio::task::spawn_blocking(move || {
            let files: Vec<JobFile> = contents
                .into_iter()
                .zip(&encodings)
                .map(|(content, encoding)| JobFile::decoded(content, encoding))
                .collect();
            job::run(&query, &files, bounds)
        })
        .await
        .map_err(|e| Error::Internal(format!("scan task failed: {e}")))?;
        metrics::histogram!("agentvfs_worker_grep_job_seconds").record(started.elapsed().as_secs_f64());
        metrics::counter!("agentvfs_worker_bytes_scanned_total").increment(result.bytes_scanned);
        let mut reply = to_proto(&job.files, result);
        reply.files_fetched = fetched as u64;
        Ok(Response::new(reply))
    }

    async fn apply_index_jobs(&self, request: Request<pb::IndexJobBatch>) -> Result<Response<pb::IndexAck>, Status> {
        let jobs = request.into_inner().jobs;
        // Content of text files to index, fetched in one pass.
        let wanted: Vec<String> = jobs
            .iter()
            .filter(|j| {
                j.op == pb::IndexOp::Upsert as i32
                    && j.is_text
                    && (j.sequence == 0 || j.sequence > self.index.committed())
            })
            .map(|j| j.hash.clone())
            .collect();
        let fetched = self.fetcher.fetch_all(wanted.clone()).await.map_err(Error::from)?;
        let contents: HashMap<String, Result<Bytes, String>> = wanted.into_iter().zip(fetched).collect();
        let mut ready = Vec::with_capacity(jobs.len());
        for job in jobs {
            let op = match pb::IndexOp::try_from(job.op) {
                Ok(pb::IndexOp::Upsert) => {
                    let text = match contents.get(&job.hash).cloned() {
                        Some(Ok(bytes)) => {
                            Some(String::from_utf8_lossy(&job::decode(bytes, &job.encoding)).into_owned())
                        }
                        Some(Err(error)) => {
                            // Not acknowledged: the front delivers it again.
                            return Err(Error::IndexContent(error).into());
                        }
                        None => None,
                    };
                    JobOp::Upsert { path: job.path, version: job.version, text }
                }
                Ok(pb::IndexOp::Delete) => JobOp::Delete,
                Ok(pb::IndexOp::DropSpace) => JobOp::DropSpace,
                Ok(pb::IndexOp::DropAll) => JobOp::DropAll,
                _ => {
                    let message = "Unknown index operation.".to_owned();
                    return Err(Error::InvalidArgument { field: "jobs.op", message }.into());
                }
            };
            ready.push(Job {
                sequence: job.sequence,
                space: job.space_id,
                revision: job.revision,
                node: job.node_id,
                op,
            });
        }
        let index = self.index.clone();
        let committed = tokio::task::spawn_blocking(move || index.apply(ready))
            .await
            .map_err(|e| Error::Internal(format!("index task failed: {e}")))?
            .map_err(|e| Error::Internal(e.to_string()))?;
        fault_point!("index::before_ack");
        Ok(Response::new(pb::IndexAck { committed_sequence: committed }))
    }

    async fn index_status(
        &self,
        _: Request<pb::IndexStatusRequest>,
    ) -> Result<Response<pb::IndexStatusResponse>, Status> {
        Ok(Response::new(pb::IndexStatusResponse {
            committed_sequence: self.index.committed(),
            fresh: self.index.fresh(),
        }))
    }

    async fn search_index(&self, request: Request<pb::IndexQuery>) -> Result<Response<pb::IndexQueryResult>, Status> {
        let query = request.into_inner();
        let index = self.index.clone();
        let (hits, revision) = tokio::task::spawn_blocking(move || {
            index.search(&query.space_id, &query.path_prefix, &query.query, query.limit as usize, query.offset as usize)
        })
        .await
        .map_err(|e| Error::Internal(format!("search task failed: {e}")))?
        .map_err(|e| Error::Internal(e.to_string()))?;
        Ok(Response::new(pb::IndexQueryResult {
            hits: hits
                .into_iter()
                .map(|h| pb::IndexHit {
                    node_id: h.node,
                    path: h.path,
                    version: h.version,
                    score: h.score,
                    snippet: h.snippet,
                    highlight_ranges: h.highlights.into_iter().flat_map(|(a, b)| [a, b]).collect(),
                })
                .collect(),
            index_revision: revision,
        }))
    }
}

fn to_proto(files: &[pb::GrepFileRef], result: job::JobResult) -> pb::GrepJobResult {
    pb::GrepJobResult {
        entries: result
            .entries
            .into_iter()
            .map(|entry| match entry {
                JobEntry::Hit { file, hit } => hit_entry(file, hit),
                JobEntry::File { file, count } => {
                    pb::GrepJobEntry { file_index: index(file), count, ..Default::default() }
                }
            })
            .collect(),
        skipped: result
            .skipped
            .into_iter()
            .map(|(i, reason)| pb::SkippedFile {
                path: files.get(i).map(|f| f.path.clone()).unwrap_or_default(),
                reason,
            })
            .collect(),
        files_done: index(result.files_done),
        stopped_after_line: result.stopped_after_line,
        bytes_scanned: result.bytes_scanned,
        entries_skipped: result.entries_skipped,
        files_fetched: 0,
    }
}

fn hit_entry(file: usize, hit: Hit) -> pb::GrepJobEntry {
    let context = |lines: Vec<Line>| {
        lines.into_iter().map(|l| pb::ContextLine { line_number: l.number, text: l.text, clipped: l.clipped }).collect()
    };
    pb::GrepJobEntry {
        file_index: index(file),
        line_number: hit.line.number,
        column: hit.column,
        line: hit.line.text,
        clipped: hit.line.clipped,
        submatches: hit.submatches.into_iter().map(|(start, end)| pb::Range { start, end }).collect(),
        before: context(hit.before),
        after: context(hit.after),
        count: 0,
    }
}

fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}
