//! `find`, `grep` and `search`.

use std::collections::BTreeMap;

use agentvfs_proto::v1 as pb;

use super::{Context, Paging, TokenArgs};
use crate::errors::CliError;
use crate::output::{line, note};

#[derive(Debug, clap::Args)]
pub struct FindArgs {
    /// Glob over paths: `*`, `?`, `**`, `[abc]`, `{a,b}`; without `/` it matches base names.
    pattern: String,
    /// Root directory; default `/`.
    path: Option<String>,
    #[command(flatten)]
    paging: Paging,
}

pub async fn find(ctx: &mut Context, args: FindArgs) -> Result<(), CliError> {
    let mut token = args.paging.page_token.clone();
    loop {
        let request = pb::FindRequest {
            space: ctx.space.clone(),
            pattern: args.pattern.clone(),
            path: args.path.clone().unwrap_or_default(),
            page_size: args.paging.page_size,
            page_token: token,
            ..Default::default()
        };
        let page = ctx.client.fs.find(request).await?.into_inner();
        if ctx.out.is_json() {
            ctx.out.message("FindResponse", &page)?;
        } else {
            for found in &page.matches {
                line(&found.path)?;
            }
        }
        match args.paging.follow(&ctx.out, &page.next_page_token) {
            Some(next) => token = next,
            None => return Ok(()),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct GrepArgs {
    /// A regex (or, with -F, a literal).
    pattern: String,
    /// Root directory or one file; default `/`.
    path: Option<String>,
    /// Case-insensitive.
    #[arg(short = 'i', long)]
    ignore_case: bool,
    /// The pattern is a literal string.
    #[arg(short = 'F', long)]
    fixed_strings: bool,
    /// `.` matches newlines and matches may span lines.
    #[arg(short = 'U', long)]
    multiline: bool,
    /// Show line numbers (the default).
    #[arg(short = 'n', long, overrides_with = "no_line_number")]
    line_number: bool,
    /// Hide line numbers.
    #[arg(short = 'N', long)]
    no_line_number: bool,
    /// Lines of context after each match.
    #[arg(short = 'A', long, value_name = "N", default_value_t = 0)]
    after_context: u32,
    /// Lines of context before each match.
    #[arg(short = 'B', long, value_name = "N", default_value_t = 0)]
    before_context: u32,
    /// Lines of context before and after each match.
    #[arg(short = 'C', long, value_name = "N", default_value_t = 0)]
    context: u32,
    /// Print `path:count` per matching file.
    #[arg(short = 'c', long, conflicts_with = "files_with_matches")]
    count: bool,
    /// Print only the paths of matching files.
    #[arg(short = 'l', long)]
    files_with_matches: bool,
    /// Only files whose path matches this glob.
    #[arg(short = 'g', long, default_value = "")]
    glob: String,
    /// Only files of this ripgrep type (`rust`, `py`, `md`, …); repeatable.
    #[arg(short = 't', long = "type", value_name = "TYPE")]
    types: Vec<String>,
    #[command(flatten)]
    paging: Paging,
    /// A page's budget in tokens, over its matches' lines and context (content mode).
    #[command(flatten)]
    tokens: TokenArgs,
}

pub async fn grep(ctx: &mut Context, args: GrepArgs) -> Result<(), CliError> {
    let mode = if args.count {
        pb::GrepOutputMode::Count
    } else if args.files_with_matches {
        pb::GrepOutputMode::FilesWithMatches
    } else {
        pb::GrepOutputMode::Content
    };
    let line_numbers = !args.no_line_number;
    let with_context = args.after_context + args.before_context + args.context > 0;
    let mut printer = ContentPrinter::new(line_numbers, with_context);
    let mut token = args.paging.page_token.clone();
    loop {
        let request = pb::GrepRequest {
            space: ctx.space.clone(),
            pattern: args.pattern.clone(),
            path: args.path.clone().unwrap_or_default(),
            glob: args.glob.clone(),
            r#type: args.types.clone(),
            fixed_strings: args.fixed_strings,
            case_insensitive: args.ignore_case,
            multiline: args.multiline,
            output_mode: mode as i32,
            line_numbers: Some(line_numbers),
            before_context: args.before_context,
            after_context: args.after_context,
            context: args.context,
            head_limit: (args.paging.page_size > 0).then_some(args.paging.page_size),
            page_token: token,
            max_tokens: args.tokens.max_tokens,
            tokenizer: args.tokens.tokenizer.clone(),
            ..Default::default()
        };
        let page = ctx.client.fs.grep(request).await?.into_inner();
        if ctx.out.is_json() {
            ctx.out.message("GrepResponse", &page)?;
        } else {
            for file in &page.files {
                line(&if args.count { format!("{}:{}", file.path, file.count) } else { file.path.clone() })?;
            }
            for found in &page.matches {
                printer.add(found)?;
            }
            for skipped in &page.skipped {
                note(&format!("skipped: {} ({})", skipped.path, skipped.reason));
            }
        }
        let next = args.paging.follow(&ctx.out, &page.next_page_token);
        if next.is_none() {
            // A page ends a printed hunk: the next page may start anywhere.
            printer.flush()?;
        }
        match next {
            Some(next) => token = next,
            None => return Ok(()),
        }
    }
}

/// Prints matches like ripgrep: `path:line:text` for matching lines,
/// `path-line-text` for context, and, when context was asked for, `--`
/// between non-adjacent hunks.
/// Lines are gathered per file first, because one match's context can
/// overlap the next match (which must then print as a match, once).
#[derive(Debug)]
struct ContentPrinter {
    line_numbers: bool,
    separators: bool,
    path: String,
    /// Line number → (is a match, text).
    lines: BTreeMap<u64, (bool, String)>,
    printed_any: bool,
}

impl ContentPrinter {
    fn new(line_numbers: bool, separators: bool) -> Self {
        ContentPrinter { line_numbers, separators, path: String::new(), lines: BTreeMap::new(), printed_any: false }
    }

    fn add(&mut self, found: &pb::GrepMatch) -> Result<(), CliError> {
        if found.path != self.path {
            self.flush()?;
            self.path = found.path.clone();
        }
        for context in found.before.iter().chain(&found.after) {
            self.lines.entry(context.line_number).or_insert_with(|| (false, strip_terminator(&context.text)));
        }
        // A multiline match spans several lines, all printed as matching.
        for (offset, text) in found.line.trim_end_matches(['\n', '\r']).split('\n').enumerate() {
            let number = found.line_number + offset as u64;
            self.lines.insert(number, (true, strip_terminator(text)));
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), CliError> {
        let mut previous: Option<u64> = None;
        for (number, (is_match, text)) in std::mem::take(&mut self.lines) {
            let adjacent = previous.is_some_and(|p| p + 1 == number);
            if self.separators && self.printed_any && !adjacent {
                line("--")?;
            }
            let separator = if is_match { ':' } else { '-' };
            let printed = if self.line_numbers {
                format!("{}{separator}{number}{separator}{text}", self.path)
            } else {
                format!("{}{separator}{text}", self.path)
            };
            line(&printed)?;
            self.printed_any = true;
            previous = Some(number);
        }
        Ok(())
    }
}

fn strip_terminator(text: &str) -> String {
    text.strip_suffix('\n').map_or(text, |t| t.strip_suffix('\r').unwrap_or(t)).to_owned()
}

#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// Full-text query.
    query: String,
    /// Only below this directory.
    #[arg(long, default_value = "")]
    path: String,
    /// Only files whose path matches this glob.
    #[arg(long, default_value = "")]
    glob: String,
    #[command(flatten)]
    paging: Paging,
}

pub async fn search(ctx: &mut Context, args: SearchArgs) -> Result<(), CliError> {
    let mut token = args.paging.page_token.clone();
    loop {
        let request = pb::SearchRequest {
            space: ctx.space.clone(),
            query: args.query.clone(),
            path: args.path.clone(),
            glob: args.glob.clone(),
            page_size: args.paging.page_size,
            page_token: token,
            ..Default::default()
        };
        let page = ctx.client.fs.search(request).await?.into_inner();
        if ctx.out.is_json() {
            ctx.out.message("SearchResponse", &page)?;
        } else {
            for hit in &page.hits {
                let snippet = hit.snippet.split_whitespace().collect::<Vec<_>>().join(" ");
                line(&format!("{}:v{}: {snippet}", hit.path, hit.version))?;
            }
        }
        match args.paging.follow(&ctx.out, &page.next_page_token) {
            Some(next) => token = next,
            None => return Ok(()),
        }
    }
}
