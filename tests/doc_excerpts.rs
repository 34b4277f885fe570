//! The Python and JavaScript code blocks of README.md and docs/*.md are excerpts of files that
//! run in tests (examples/ under tests/examples.rs, python/README.md under the Python suite):
//! each block follows a `<!-- excerpt: path -->` line naming its source, and every non-blank
//! line of the block, whitespace-trimmed, appears in that file in the same order. An elision
//! line (`...`, or a comment starting `# ...` / `// ...`) stands for lines left out. No server.

use std::path::Path;

/// The fence languages checked here (redis-cli sessions run in tests/doc_examples.rs, the
/// Rust blocks of client/README.md are doc tests).
const LANGUAGES: [&str; 3] = ["python", "js", "javascript"];
const MARKER: &str = "<!-- excerpt: ";

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// README.md and every docs/*.md.
fn documents() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut docs: Vec<String> = std::fs::read_dir(&dir)
        .expect("docs/")
        .map(|e| {
            e.expect("docs/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    docs.push("README.md".to_string());
    docs
}

/// A checked block: where it starts, the source its marker names (if any), its lines.
struct Block {
    line: usize,
    source: Option<String>,
    body: Vec<String>,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = vec![];
    let mut marker: Option<String> = None;
    let mut open: Option<(bool, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some((checked, block)) = open.as_mut() {
            if line.trim_start().starts_with("```") {
                let (checked, block) = open.take().unwrap();
                if checked {
                    out.push(block);
                }
            } else if *checked {
                block.body.push(line.to_string());
            }
            continue;
        }
        if let Some(lang) = line.trim_start().strip_prefix("```") {
            let block = Block {
                line: i + 1,
                source: marker.take(),
                body: vec![],
            };
            open = Some((LANGUAGES.contains(&lang.trim()), block));
        } else if let Some(rest) = line.trim().strip_prefix(MARKER) {
            let path = rest.strip_suffix("-->").expect("marker ends with -->");
            marker = Some(path.trim().to_string());
        } else if !line.trim().is_empty() {
            // The marker names the block right below it, nothing further down.
            marker = None;
        }
    }
    out
}

fn is_elision(line: &str) -> bool {
    line == "..." || line.starts_with("# ...") || line.starts_with("// ...")
}

/// The first line of `excerpt` not found, in order, among the lines of `source`.
fn first_missing<'a>(excerpt: &'a [String], source: &str) -> Option<&'a str> {
    let mut source = source.lines().map(str::trim);
    excerpt
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty() && !is_elision(l))
        .find(|wanted| !source.any(|l| l == *wanted))
}

#[test]
fn python_and_javascript_blocks_are_excerpts_of_tested_files() {
    let mut checked = 0;
    for doc in documents() {
        for block in blocks(&read(&doc)) {
            let at = format!("{doc}:{}", block.line);
            let source = block.source.unwrap_or_else(|| {
                panic!("{at}: no `{MARKER}path -->` line right above the block")
            });
            if let Some(line) = first_missing(&block.body, &read(&source)) {
                panic!("{at}: `{line}` is not in {source} (in this order)");
            }
            checked += 1;
        }
    }
    // docs/CLIENTS.md alone has five: a change that hides them from the parser fails here.
    assert!(checked >= 5, "only {checked} excerpts checked");
}

#[test]
fn an_excerpt_out_of_order_or_changed_is_caught() {
    let source = "a = 1\n    b = 2\nc = 3\n";
    let lines = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert_eq!(
        first_missing(&lines(&["a = 1", "...", "  c = 3", ""]), source),
        None
    );
    assert_eq!(
        first_missing(&lines(&["c = 3", "a = 1"]), source),
        Some("a = 1")
    );
    assert_eq!(
        first_missing(&lines(&["a = 1", "b = 3"]), source),
        Some("b = 3")
    );
}
