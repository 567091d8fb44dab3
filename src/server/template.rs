//! Matching URIs against RFC 6570 level-1 templates (`test://template/{id}/data`).
//!
//! Only simple `{name}` expressions are supported; a variable matches one or more characters
//! up to the next literal. A value is handed over as the URI writes it (percent-encoded), and
//! is refused when it could step out of its place in a path: one holding `/` or `\\`, written
//! out or percent-encoded, a NUL, or one that decodes to `.` or `..`.

use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    /// A variable, and whether it is in the path (before any `?` or `#`).
    Variable(String, bool),
}

/// A parsed URI template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UriTemplate {
    parts: Vec<Part>,
}

impl UriTemplate {
    /// Parses a template; operators (`{+x}`, `{?x}`, ...) and adjacent variables are refused.
    pub fn parse(template: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = template;
        // Until a literal holds `?` or `#`, variables are in the path.
        let mut in_path = true;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                in_path &= !rest[..open].contains(['?', '#']);
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let close = rest[open..].find('}').ok_or("unclosed '{'")? + open;
            let name = &rest[open + 1..close];
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!("unsupported expression {{{name}}}"));
            }
            if matches!(parts.last(), Some(Part::Variable(..))) {
                return Err("two variables must be separated by a literal".into());
            }
            parts.push(Part::Variable(name.to_owned(), in_path));
            rest = &rest[close + 1..];
        }
        if rest.contains('}') {
            return Err("unmatched '}'".into());
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Ok(Self { parts })
    }

    /// The variables of `uri`, if it matches.
    pub fn matches(&self, uri: &str) -> Option<HashMap<String, String>> {
        let mut vars = HashMap::new();
        let mut rest = uri;
        for (i, part) in self.parts.iter().enumerate() {
            match part {
                Part::Literal(literal) => rest = rest.strip_prefix(literal.as_str())?,
                Part::Variable(name, in_path) => {
                    let end = match self.parts.get(i + 1) {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    let value = &rest[..end];
                    if value.is_empty() || value.contains('/') || (*in_path && !stays_in_place(value)) {
                        return None;
                    }
                    vars.insert(name.clone(), value.to_owned());
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(vars)
    }
}

/// Whether a variable's value, decoded, names one path segment: no separator, no NUL, not a
/// dot-segment. A handler that decodes it and joins it to a path stays where it meant to be.
fn stays_in_place(value: &str) -> bool {
    let bytes = value.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(high), Some(low)) => {
                decoded.push((high * 16 + low) as u8);
                i += 3;
            }
            (byte, _, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    !decoded.iter().any(|b| matches!(b, b'/' | b'\\' | 0)) && decoded != b"." && decoded != b".."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_simple_templates() {
        let t = UriTemplate::parse("test://template/{id}/data").unwrap();
        assert_eq!(t.matches("test://template/42/data").unwrap()["id"], "42");
        assert!(t.matches("test://template//data").is_none());
        assert!(t.matches("test://template/a/b/data").is_none());
        assert!(t.matches("test://template/42/data/x").is_none());
        assert!(t.matches("other://template/42/data").is_none());
        let tail = UriTemplate::parse("file:///notes/{name}").unwrap();
        assert_eq!(tail.matches("file:///notes/todo").unwrap()["name"], "todo");
        assert!(tail.matches("file:///notes/../etc").is_none());
        assert_eq!(tail.matches("file:///notes/a%20b.md").unwrap()["name"], "a%20b.md", "as the URI writes it");
        assert_eq!(tail.matches("file:///notes/...").unwrap()["name"], "...", "three dots are a name");
        for stepping_out in ["..", ".", "%2e%2E", ".%2e", "a%2Fb", "a%2fb", "a\\b", "a%5cb", "a%00b", "%2e%2e%2F.."] {
            assert!(tail.matches(&format!("file:///notes/{stepping_out}")).is_none(), "{stepping_out}");
        }
        // In the query, a value is a term, not a segment.
        let search = UriTemplate::parse("search://notes/{scope}?term={term}").unwrap();
        let found = search.matches("search://notes/all?term=a%2Fb").unwrap();
        assert_eq!((found["scope"].as_str(), found["term"].as_str()), ("all", "a%2Fb"));
        assert!(search.matches("search://notes/..?term=x").is_none(), "the path's variable is still a segment");
        assert!(search.matches("search://notes/all?term=a/b").is_none(), "no raw slash anywhere, as before");
    }

    #[test]
    fn refuses_unsupported_templates() {
        assert!(UriTemplate::parse("a/{+path}").is_err());
        assert!(UriTemplate::parse("a/{x}{y}").is_err());
        assert!(UriTemplate::parse("a/{x").is_err());
        assert!(UriTemplate::parse("a/x}").is_err());
    }
}
