//! The layer order of `ARCHITECTURE.md`, enforced: a module may use only modules on its own
//! layer or below. Reads the `crate::` paths of every file under `src/` (comments and the
//! trailing `#[cfg(test)]` module aside), so an import that points up fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom to top. Modules on one line are one layer and may use each other.
const LAYERS: &[&[&str]] = &[
    &["protocol"],
    &["outbound", "telemetry"],
    &["body", "state", "store"],
    &["observe"],
    &["security"],
    &["handler"],
    &["tasks"],
    &["server"],
    &["transport"],
    &["jobs", "client"],
    &["catalogue", "tools"],
    &["settings", "compose", "testing"],
    &["vercel", "local", "lib", "bin"],
];

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|layer| layer.contains(&module))
        .unwrap_or_else(|| panic!("src/{module} is on no layer: add it to LAYERS and ARCHITECTURE.md"))
}

/// The top-level module a file under `src/` belongs to.
fn module_of(relative: &Path) -> String {
    let first = relative.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_owned()
}

/// `text` without its `#[cfg(test)] mod tests { … }` block (braces counted; the tests may use
/// anything).
fn without_test_module(text: &str) -> String {
    let Some(start) = text.find("#[cfg(test)]\nmod tests {") else { return text.to_owned() };
    let mut depth = 0usize;
    for (offset, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    let end = start + offset + 1;
                    return format!("{}{}", &text[..start], &text[end..]);
                }
            }
            _ => {}
        }
    }
    text[..start].to_owned()
}

/// The module behind a name at the crate root: a module itself, a re-export from `lib.rs`
/// (`crate::Parts` is compose's, as `pub use compose::{Parts, …}` says), or an item of `lib.rs`.
fn module_of_root_item(name: &str) -> String {
    if LAYERS.iter().any(|layer| layer.contains(&name)) {
        return name.to_owned();
    }
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    for line in lib.lines().filter_map(|line| line.strip_prefix("pub use ")) {
        let (module, items) = line.trim_end_matches(';').split_once("::").unwrap_or((line, ""));
        let items = items.trim_start_matches('{').trim_end_matches('}');
        if items.split(',').any(|item| item.trim().rsplit("::").next() == Some(name)) {
            return module.to_owned();
        }
    }
    "lib".to_owned()
}

/// The modules a file's code names through `crate::`.
fn uses(text: &str) -> BTreeSet<String> {
    let code = without_test_module(text);
    let mut found = BTreeSet::new();
    for line in code.lines().map(str::trim_start).filter(|line| !line.starts_with("//")) {
        for (at, _) in line.match_indices("crate::") {
            let preceded_by_ident =
                line[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
            if preceded_by_ident {
                continue; // `vercel_mcp_crate::`, `$crate::`
            }
            let rest = &line[at + "crate::".len()..];
            // `crate::{a::X, b}` names each module in the group.
            let names = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or_default().split(',').collect(),
                None => vec![rest],
            };
            for name in names {
                let name: String = name.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        }
    }
    found
}

/// Every `.rs` file under `src/`: its path below `src/`, and its text.
pub(crate) fn source_files() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let read = |relative: PathBuf| {
        let text = std::fs::read_to_string(src.join(&relative)).unwrap();
        (relative, text)
    };
    crate::common::rust_files_under("src").into_iter().map(read).collect()
}

fn upward_edges() -> BTreeMap<(String, String), Vec<String>> {
    let mut edges: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (relative, text) in source_files() {
        let from = module_of(&relative);
        for to in uses(&text) {
            let to = module_of_root_item(&to);
            if to != from && layer_of(&to) > layer_of(&from) {
                edges.entry((from.clone(), to)).or_default().push(relative.display().to_string());
            }
        }
    }
    edges
}

#[test]
fn every_layer_names_only_modules_that_exist() {
    let found: BTreeSet<String> = source_files().iter().map(|(relative, _)| module_of(relative)).collect();
    let mut listed: BTreeSet<String> = LAYERS.iter().flat_map(|layer| layer.iter().map(|m| (*m).to_owned())).collect();
    // The slot a fork's own `tools` module goes in (ARCHITECTURE.md, docs/guide.md): listed
    // whether or not the fork has written it yet.
    if !found.contains("tools") {
        listed.remove("tools");
    }
    assert_eq!(listed, found, "LAYERS and the modules under src/ differ");
}

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let upward: Vec<String> =
        upward_edges().iter().map(|((from, to), files)| format!("{from} -> {to} (in {})", files.join(", "))).collect();
    assert!(upward.is_empty(), "imports that point up the layers:\n{}", upward.join("\n"));
}

/// The examples (the modules under `src/catalogue/` other than its shared `backends`).
fn example_modules() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/catalogue");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().trim_end_matches(".rs").to_owned())
        .filter(|name| name != "mod" && name != "backends")
        .collect();
    names.sort();
    names
}

#[test]
fn only_the_catalogue_and_the_composition_root_name_an_example() {
    let examples = example_modules();
    assert!(examples.contains(&"query_command".to_owned()) && examples.len() >= 10, "{examples:?}");
    let mut found = Vec::new();
    for (relative, text) in source_files() {
        let relative = relative.display().to_string();
        if relative.starts_with("catalogue/") || relative == "compose.rs" || relative == "settings.rs" {
            continue;
        }
        let code = without_test_module(&text);
        for example in &examples {
            if code.contains(&format!("catalogue::{example}")) {
                found.push(format!("{relative} names {example}"));
            }
        }
    }
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn the_reader_sees_crate_paths_and_ignores_comments_and_tests() {
    let text = "use crate::state::Clock;\n// crate::compose in a comment\nlet x = crate::body::Body::empty();\n\
                #[cfg(test)]\nmod tests {\n    fn f() { use crate::transport::App; }\n}\nuse crate::jobs::Job;\n";
    let expected = ["body", "jobs", "state"].map(str::to_owned);
    assert_eq!(uses(text), BTreeSet::from(expected), "code after the test module still counts");
    let grouped = uses("use crate::{Parts, server::McpServer, state::Clock};\n");
    assert_eq!(grouped, BTreeSet::from(["Parts", "server", "state"].map(str::to_owned)), "a group names each");
    assert_eq!(module_of_root_item("Parts"), "compose");
    assert_eq!(module_of_root_item("App"), "transport");
    assert_eq!(module_of_root_item("VERSION"), "compose");
    assert_eq!(module_of_root_item("no_such_item"), "lib");
    assert_eq!(module_of(Path::new("server/dispatch.rs")), "server");
    assert_eq!(module_of(Path::new("vercel.rs")), "vercel");
    assert!(layer_of("protocol") < layer_of("transport"));
}
