//! The `Worker` service: grep jobs from the front.

use std::collections::HashMap;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::worker_server::Worker;
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::fetch::Fetcher;
use crate::job::{self, Bounds, JobEntry, JobFile};
use crate::scan::{Hit, Line, Mode, Options, Query};

/// Serves grep jobs.
#[derive(Debug, Clone)]
pub struct WorkerService {
    fetcher: Fetcher,
}

impl WorkerService {
    pub fn new(fetcher: Fetcher) -> Self {
        Self { fetcher }
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
                return Err(status(Code::InvalidArgument, "INVALID_ARGUMENT", "Unknown output mode."));
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
        let query = Query::new(&job.pattern, options).map_err(|e| {
            status(
                Code::InvalidArgument,
                "INVALID_PATTERN",
                &format!("The pattern does not compile within bounds: {e}"),
            )
        })?;
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
        let contents = self.fetcher.fetch_all(job.files.iter().map(|f| f.hash.clone()).collect()).await;
        let files: Vec<JobFile> = contents.into_iter().map(|content| JobFile { content }).collect();
        let result = tokio::task::spawn_blocking(move || job::run(&query, &files, bounds))
            .await
            .map_err(|e| status(Code::Internal, "INTERNAL", &format!("scan task failed: {e}")))?;
        Ok(Response::new(to_proto(&job.files, result)))
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

/// A status with the agentvfs `ErrorInfo`.
pub fn status(code: Code, reason: &str, message: &str) -> Status {
    let retryable = matches!(code, Code::Unavailable | Code::ResourceExhausted);
    let metadata = HashMap::from([
        ("retryable".to_owned(), retryable.to_string()),
        ("nextAction".to_owned(), "Fix the request as the message says, then retry.".to_owned()),
    ]);
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason, agentvfs_proto::ERROR_DOMAIN, metadata),
    )
}
