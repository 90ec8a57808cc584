//! Files every space starts with: `/AGENT.md` (what the space holds and which
//! tools an agent has) and the folders `/functions/`, `/scenarios/`, `/scripts/`.

/// The system folders, created with every space.
pub const SYSTEM_DIRS: [&str; 3] = ["/functions", "/scenarios", "/scripts"];

/// The path of the generated entry point.
pub const AGENT_MD: &str = "/AGENT.md";

/// The generated `/AGENT.md` for a space with the given registered functions
/// (name, one-line description).
pub fn agent_md(space_name: &str, functions: &[(String, String)]) -> String {
    let mut out = format!(
        "# {space_name}\n\
         \n\
         This is a versioned file system. Every change makes a new version; nothing\n\
         you do can silently destroy earlier content.\n\
         \n\
         ## Layout\n\
         \n\
         | Path | What it holds |\n\
         |---|---|\n\
         | `/AGENT.md` | This file: the layout and your tools. |\n\
         | `/functions/` | One Markdown file per function the host application registered. |\n\
         | `/scenarios/` | Business workflows written by the host application. |\n\
         | `/scripts/` | Scripts that agents save for later use. |\n\
         \n\
         ## Tools\n\
         \n\
         - `ls`: list a directory (`recursive`, `glob`); follow `next_page_token`.\n\
         - `read`: read a text file in slices (`offset` line, `limit` lines, `max_chars`); continue from `next`.\n\
         - `write`: create or replace a file (`overwrite`, `append`, `create-new`).\n\
         - `edit`: exact string replacement; read the file first, and make `old_text` match exactly once.\n\
         - `find`: find files by glob (`*.md` matches at any depth).\n\
         - `grep`: search file contents by regex or literal, with context lines and pages.\n\
         - `search`: ranked full-text search.\n\
         \n\
         Paths are absolute and `/`-separated; `..` is never allowed.\n"
    );
    out.push_str("\n## Functions\n\n");
    if functions.is_empty() {
        out.push_str("No functions are registered yet.\n");
    }
    for (name, description) in functions {
        let summary = description.lines().next().unwrap_or("");
        out.push_str(&format!("- [`{name}`](/functions/{name}.md): {summary}\n"));
    }
    out
}
