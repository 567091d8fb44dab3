//! The configuration a deployment reads is the configuration its documents list: every
//! environment variable named under `src/` appears in `.env.example` and in README's table, and
//! every variable `.env.example` lists is read. A variable added without its line, or a line
//! left for a variable no longer read, fails here.

use std::collections::BTreeSet;
use std::path::Path;

/// Names the library reads that are not the operator's to set, and where they are documented
/// instead.
const NOT_OPERATOR_SETTINGS: &[&str] = &[
    // Set by Vercel's Rust runtime on the platform (README's `VERCEL` row).
    "VERCEL_IPC_PATH",
    // The test suite's switch (README, "Tests").
    "MCP_TEST_SKIP_REDIS",
];

/// Prefixes of the variables the library reads.
const PREFIXES: &[&str] = &["MCP_", "OTEL_", "VERCEL", "REDIS_", "CRON_", "DATABASE_", "LP_", "PORT"];

/// Every quoted name under `dir` that starts with one of [`PREFIXES`].
fn names_in(dir: &Path, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            names_in(&path, found);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for quoted in text.split('"').skip(1).step_by(2) {
            let is_name = !quoted.is_empty()
                && quoted.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
                && PREFIXES.iter().any(|p| quoted.starts_with(p));
            if is_name {
                found.insert(quoted.to_owned());
            }
        }
    }
}

/// Whether `text` names `name` as a whole word (`MCP_JOB_STEP_MS` does not name `MCP_JOB_STEP`).
fn names(text: &str, name: &str) -> bool {
    let part_of_a_name = |c: Option<char>| c.is_some_and(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    text.match_indices(name).any(|(at, _)| {
        !part_of_a_name(text[..at].chars().next_back()) && !part_of_a_name(text[at + name.len()..].chars().next())
    })
}

/// The variables `.env.example` lists, set or commented out (`NAME=` or `# NAME=`).
fn listed_in_env_example(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(|line| line.trim().trim_start_matches('#').trim())
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .filter(|name| {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_variable_read_is_documented_and_every_documented_one_is_read() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut read = BTreeSet::new();
    names_in(&root.join("src"), &mut read);
    assert!(read.contains("MCP_STATE_SECRET") && read.contains("REDIS_URL"), "the scan finds names: {read:?}");
    let env_example = std::fs::read_to_string(root.join(".env.example")).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let listed = listed_in_env_example(&env_example);
    // A route's scopes are read by a pattern (`MCP_AUTH_SCOPES_<EXAMPLE>`, documented as such):
    // names of that shape in the source are the pattern's parts and its tests' examples.
    let by_pattern = |n: &str| n.starts_with("MCP_AUTH_SCOPES_") && n != "MCP_AUTH_SCOPES_SUPPORTED";
    let operator: Vec<&String> =
        read.iter().filter(|n| !NOT_OPERATOR_SETTINGS.contains(&n.as_str()) && !by_pattern(n)).collect();
    let missing: Vec<&&String> = operator.iter().filter(|n| !listed.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "read under src/ but not listed in .env.example: {missing:?}");
    let unexplained: Vec<&&String> = operator.iter().filter(|n| !names(&readme, n)).collect();
    assert!(unexplained.is_empty(), "read under src/ but not named in README.md: {unexplained:?}");
    for name in NOT_OPERATOR_SETTINGS {
        assert!(names(&readme, name), "{name} is explained in README.md");
    }
    // The other way: a listed variable nothing reads (the per-example scope variables are read
    // by a pattern, `MCP_AUTH_SCOPES_<EXAMPLE>`).
    let stale: Vec<&String> =
        listed.iter().filter(|n| !read.contains(n.as_str()) && !n.starts_with("MCP_AUTH_SCOPES_")).collect();
    assert!(stale.is_empty(), "listed in .env.example but read nowhere under src/: {stale:?}");
}

#[test]
fn the_scan_reads_assignments_and_comments_alike() {
    assert!(names("set `MCP_A` and MCP_B=1", "MCP_A") && names("set `MCP_A` and MCP_B=1", "MCP_B"));
    assert!(!names("MCP_AB and XMCP_A", "MCP_A"), "a name inside another is not named");
    let listed = listed_in_env_example("# a comment\nMCP_A=\n# MCP_B=1\nnot a variable = x\n  # OTEL_C=http://x=y\n");
    assert_eq!(listed.into_iter().collect::<Vec<_>>(), ["MCP_A", "MCP_B", "OTEL_C"]);
}
