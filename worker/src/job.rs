//! Running a grep job: every file of the page scanned on all cores, the
//! results merged in file order under the job's entry budget.

use std::sync::atomic::{AtomicUsize, Ordering};

use prost::bytes::Bytes;
use rayon::prelude::*;

use crate::scan::{FileScan, Hit, Mode, Query};

/// One file of a job, its content already fetched (or why it could not be).
#[derive(Debug, Clone)]
pub struct JobFile {
    pub content: Result<Bytes, String>,
}

impl JobFile {
    /// A file whose `content` is text in `encoding` (a WHATWG label; empty
    /// for UTF-8), as the scan sees it: decoded to UTF-8, so that lines and
    /// columns are those of the text, as for UTF-8 files.
    pub fn decoded(content: Result<Bytes, String>, encoding: &str) -> Self {
        Self { content: content.map(|bytes| decode(bytes, encoding)) }
    }
}

/// `bytes` of text in `encoding`, in UTF-8. The front decodes the same
/// bytes without errors; a damaged byte would become U+FFFD.
pub fn decode(bytes: Bytes, encoding: &str) -> Bytes {
    match encoding_rs::Encoding::for_label(encoding.as_bytes()) {
        Some(encoding) if encoding != encoding_rs::UTF_8 => {
            Bytes::from(encoding.decode_without_bom_handling(&bytes).0.into_owned())
        }
        _ => bytes,
    }
}

/// The merged result of a job.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct JobResult {
    pub entries: Vec<JobEntry>,
    /// (file index, reason) of files that could not be scanned.
    pub skipped: Vec<(usize, String)>,
    pub files_done: usize,
    pub stopped_after_line: u64,
    pub bytes_scanned: u64,
    pub entries_skipped: u64,
}

/// An entry of the result: a hit (CONTENT) or a file with its count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEntry {
    Hit { file: usize, hit: Hit },
    File { file: usize, count: u64 },
}

/// The page bounds of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Skip hits of the first file at or before this line.
    pub resume_after_line: u64,
    /// Most entries to return (`usize::MAX` for no limit).
    pub max_entries: usize,
    /// Entries to pass over first.
    pub skip_entries: u64,
    /// Stop once returned text reaches this many bytes (`usize::MAX`: never).
    pub max_output_bytes: usize,
}

/// Scans `files` in parallel and merges their results in order.
pub fn run(query: &Query, files: &[JobFile], bounds: Bounds) -> JobResult {
    let per_file_limit = usize::try_from(bounds.skip_entries).unwrap_or(usize::MAX).saturating_add(bounds.max_entries);
    let scans = scan_all(query, files, bounds.resume_after_line, per_file_limit);
    merge(query.mode(), files, scans, bounds)
}

fn scan_all(query: &Query, files: &[JobFile], resume: u64, limit: usize) -> Vec<Option<FileScan>> {
    let threads = rayon::current_num_threads().min(files.len()).max(1);
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<FileScan>> = vec![None; files.len()];
    // One task per thread of the pool, each taking the next file in turn, so
    // a page of a few large files and many small ones still spreads evenly.
    let done: Vec<Vec<(usize, FileScan)>> = (0..threads)
        .into_par_iter()
        .map(|_| {
            let mut scanner = query.scanner();
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(file) = files.get(i) else { break };
                if let Ok(content) = &file.content {
                    let resume = if i == 0 { resume } else { 0 };
                    done.push((i, scanner.scan(content, resume, limit)));
                }
            }
            done
        })
        .collect();
    for (i, scanned) in done.into_iter().flatten() {
        results[i] = Some(scanned);
    }
    results
}

fn merge(mode: Mode, files: &[JobFile], scans: Vec<Option<FileScan>>, bounds: Bounds) -> JobResult {
    let mut out = JobResult { stopped_after_line: 0, ..JobResult::default() };
    let mut skip = bounds.skip_entries;
    let mut output_bytes = 0usize;
    for (i, (file, scanned)) in files.iter().zip(scans).enumerate() {
        let scanned = match (&file.content, scanned) {
            (Err(reason), _) => {
                out.skipped.push((i, reason.clone()));
                out.files_done = i + 1;
                continue;
            }
            (Ok(_), None) => {
                out.skipped.push((i, "unreadable".to_owned()));
                out.files_done = i + 1;
                continue;
            }
            (Ok(content), Some(scanned)) => {
                out.bytes_scanned += content.len() as u64;
                scanned
            }
        };
        // The resume line inside this file, for a page that stops in it.
        let mut last_line = if i == 0 { bounds.resume_after_line } else { 0 };
        match mode {
            Mode::Content => {
                for hit in scanned.hits {
                    if out.entries.len() >= bounds.max_entries || output_bytes >= bounds.max_output_bytes {
                        out.files_done = i;
                        out.stopped_after_line = last_line;
                        return out;
                    }
                    last_line = hit.line.number;
                    if skip > 0 {
                        skip -= 1;
                        out.entries_skipped += 1;
                    } else {
                        output_bytes += hit_bytes(&hit);
                        out.entries.push(JobEntry::Hit { file: i, hit });
                    }
                }
                if scanned.stopped {
                    // The file has more hits than any page could take here.
                    out.files_done = i;
                    out.stopped_after_line = last_line;
                    return out;
                }
            }
            Mode::FilesWithMatches | Mode::Count if scanned.count > 0 => {
                if out.entries.len() >= bounds.max_entries {
                    out.files_done = i;
                    out.stopped_after_line = last_line;
                    return out;
                }
                if skip > 0 {
                    skip -= 1;
                    out.entries_skipped += 1;
                } else {
                    out.entries.push(JobEntry::File { file: i, count: scanned.count });
                }
            }
            Mode::FilesWithMatches | Mode::Count => {}
        }
        out.files_done = i + 1;
    }
    out
}

/// Text bytes a hit adds to a response.
fn hit_bytes(hit: &Hit) -> usize {
    let context: usize = hit.before.iter().chain(&hit.after).map(|l| l.text.len() + 16).sum();
    hit.line.text.len() + 32 + 16 * hit.submatches.len() + context
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::Options;

    fn query(pattern: &str, mode: Mode) -> Query {
        let options = Options {
            fixed_strings: false,
            case_insensitive: false,
            multiline: false,
            mode,
            before_context: 0,
            after_context: 0,
        };
        Query::new(pattern, options).unwrap()
    }

    fn files(contents: &[&str]) -> Vec<JobFile> {
        contents.iter().map(|c| JobFile { content: Ok(Bytes::copy_from_slice(c.as_bytes())) }).collect()
    }

    fn lines(result: &JobResult) -> Vec<(usize, u64)> {
        result
            .entries
            .iter()
            .map(|e| match e {
                JobEntry::Hit { file, hit } => (*file, hit.line.number),
                JobEntry::File { file, count } => (*file, *count),
            })
            .collect()
    }

    #[test]
    fn pages_stop_inside_a_file_and_resume_after_the_last_line() {
        let q = query("x", Mode::Content);
        let all = files(&["x\nx\ny\nx\n", "x\n"]);
        let bounds = Bounds { resume_after_line: 0, max_entries: 2, skip_entries: 0, max_output_bytes: usize::MAX };
        let first = run(&q, &all, bounds);
        assert_eq!(lines(&first), [(0, 1), (0, 2)]);
        assert_eq!((first.files_done, first.stopped_after_line), (0, 2));
        let second = run(&q, &all, Bounds { resume_after_line: 2, ..bounds });
        assert_eq!(lines(&second), [(0, 4), (1, 1)]);
        assert_eq!(second.files_done, 2);
    }

    #[test]
    fn skip_entries_pass_over_the_first_results() {
        let q = query("x", Mode::FilesWithMatches);
        let all = files(&["x", "no", "x", "x"]);
        let result = run(
            &q,
            &all,
            Bounds { resume_after_line: 0, max_entries: 1, skip_entries: 1, max_output_bytes: usize::MAX },
        );
        assert_eq!(lines(&result), [(2, 1)]);
        assert_eq!((result.entries_skipped, result.files_done), (1, 3));
    }

    #[test]
    fn unreadable_files_are_reported_not_dropped() {
        let q = query("x", Mode::Count);
        let mut all = files(&["x x\nx", "x"]);
        all.insert(1, JobFile { content: Err("unreadable".into()) });
        let result = run(
            &q,
            &all,
            Bounds { resume_after_line: 0, max_entries: usize::MAX, skip_entries: 0, max_output_bytes: usize::MAX },
        );
        assert_eq!(lines(&result), [(0, 2), (2, 1)]);
        assert_eq!(result.skipped, [(1, "unreadable".to_owned())]);
    }
}
