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

/// A function the host application registered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Function {
    pub name: String,
    pub description: String,
    /// JSON Schema of the parameters object, as given.
    pub parameters_json_schema: String,
    pub returns: String,
    /// (title, JSON arguments, result).
    pub examples: Vec<(String, String, String)>,
}

/// The path of a function's generated file.
pub fn function_path(name: &str) -> String {
    format!("/functions/{name}.md")
}

/// Checks a function name: `[A-Za-z0-9_.-]{1,64}`, not starting with `.`.
pub fn valid_function_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The generated `/functions/<name>.md`.
pub fn function_md(function: &Function) -> String {
    let mut out = format!("# {}\n\n{}\n\n## Parameters\n\n", function.name, function.description.trim());
    let schema: serde_json::Value = serde_json::from_str(&function.parameters_json_schema).unwrap_or_default();
    let required: Vec<&str> = schema["required"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
    match schema["properties"].as_object() {
        Some(properties) if !properties.is_empty() => {
            out.push_str("| Name | Type | Required | Description |\n|---|---|---|---|\n");
            for (name, property) in properties {
                let kind = property["type"].as_str().unwrap_or("any");
                let description = property["description"].as_str().unwrap_or("").replace('\n', " ");
                let required = if required.contains(&name.as_str()) { "yes" } else { "no" };
                out.push_str(&format!("| `{name}` | {kind} | {required} | {description} |\n"));
            }
        }
        _ => out.push_str("None.\n"),
    }
    out.push_str(&format!(
        "\n## Returns\n\n{}\n",
        if function.returns.trim().is_empty() { "Nothing." } else { function.returns.trim() }
    ));
    if !function.examples.is_empty() {
        out.push_str("\n## Examples\n");
        for (title, arguments, result) in &function.examples {
            out.push_str(&format!("\n### {title}\n\n```json\n{arguments}\n```\n"));
            if !result.is_empty() {
                out.push_str(&format!("\nResult:\n\n```\n{result}\n```\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_files_describe_parameters_from_the_schema() {
        let f = Function {
            name: "create_invoice".into(),
            description: "Creates an invoice.".into(),
            parameters_json_schema: r#"{"type":"object","properties":{"amount":{"type":"number","description":"In cents"},"memo":{"type":"string"}},"required":["amount"]}"#.into(),
            returns: "The invoice ID.".into(),
            examples: vec![("Small".into(), r#"{"amount": 100}"#.into(), "inv_1".into())],
        };
        let md = function_md(&f);
        assert!(md.contains("| `amount` | number | yes | In cents |"), "{md}");
        assert!(md.contains("| `memo` | string | no |  |"), "{md}");
        assert!(md.contains("The invoice ID."));
        assert!(md.contains("### Small"));
        let agent = agent_md("s", &[("create_invoice".into(), "Creates an invoice.".into())]);
        assert!(agent.contains("[`create_invoice`](/functions/create_invoice.md): Creates an invoice."));
    }

    #[test]
    fn function_names_are_restricted() {
        assert!(valid_function_name("a.b-c_1"));
        assert!(!valid_function_name("../x"));
        assert!(!valid_function_name(".hidden"));
        assert!(!valid_function_name(""));
        assert!(!valid_function_name(&"a".repeat(65)));
    }
}
