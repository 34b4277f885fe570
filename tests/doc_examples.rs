//! The redis-cli examples of README.md, docs/COMMANDS.md and docs/OPERATIONS.md, run in the
//! order they appear, each document against its own fresh server: every command line
//! (`127.0.0.1:6379> ...` or `$ redis-cli ...` inside a code block) is sent, and where the document shows a simple
//! reply (an integer, nil, or a list of integers) the server's reply must be the same. A
//! command with `WAIT` blocks, so it goes on its own connection and the document goes on (its
//! reply is shown later, after the commands that free the lock).

mod common;

use std::time::Duration;

use common::*;

/// The commands of a document's code blocks, each with the reply lines shown after it.
fn examples(doc: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(doc);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let mut out: Vec<(Vec<String>, Vec<String>)> = vec![];
    let mut in_block = false;
    let mut current: Option<usize> = None;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            current = None;
            continue;
        }
        if !in_block {
            continue;
        }
        // Comments after the reply (`# hold count`) are for the reader.
        let line = line.split("  #").next().unwrap().trim();
        let command = line
            .strip_prefix("127.0.0.1:6379> ")
            .or_else(|| line.strip_prefix("$ redis-cli "));
        match command {
            Some(c) => {
                out.push((c.split_whitespace().map(String::from).collect(), vec![]));
                current = Some(out.len() - 1);
            }
            None => {
                if let Some(i) = current {
                    out[i].1.push(line.to_string());
                }
            }
        }
    }
    out
}

/// redis-cli's rendering of the simple replies the documents check; None for the others.
fn render(reply: &Reply) -> Option<Vec<String>> {
    let one = |r: &Reply| match r {
        Reply::Int(n) => Some(format!("(integer) {n}")),
        Reply::Nil => Some("(nil)".to_string()),
        _ => None,
    };
    match reply {
        Reply::Arr(items) => items
            .iter()
            .enumerate()
            .map(|(i, r)| one(r).map(|s| format!("{}) {s}", i + 1)))
            .collect(),
        r => one(r).map(|s| vec![s]),
    }
}

/// `(integer) 3`, `(nil)`, or `2) (integer) 3`.
fn is_simple(line: &str) -> bool {
    let rest = match line.split_once(") ") {
        Some((n, rest)) if n.parse::<u32>().is_ok() => rest,
        _ => line,
    };
    rest == "(nil)"
        || rest
            .strip_prefix("(integer) ")
            .is_some_and(|n| n.parse::<i64>().is_ok())
}

fn run_document(doc: &str, at_least: usize) {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut blocked = vec![];
    let mut checked = 0;
    for (command, shown) in examples(doc) {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        if args.iter().any(|a| a.eq_ignore_ascii_case("WAIT")) {
            let key = args[1].to_string();
            let before = waiters(&mut c, &key);
            blocked.push(spawn_cmd(&srv, &args));
            // The documents' waits are on held locks: queued before the document goes on.
            wait_for(Duration::from_secs(10), "the WAIT queued", || {
                (waiters(&mut c, &key) > before).then_some(())
            });
            continue;
        }
        let reply = cmd(&mut c, &args);
        let shown: Vec<String> = shown
            .iter()
            .filter(|l| !l.is_empty())
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        // Only replies the document shows in full as integers, nils or lists of them.
        if !shown.is_empty() && shown.iter().all(|l| is_simple(l)) {
            assert_eq!(
                render(&reply),
                Some(shown),
                "{doc}: {} answered {reply:?}",
                command.join(" ")
            );
            checked += 1;
        }
    }
    for b in blocked {
        let (r, _) = b.wait(Duration::from_secs(10));
        assert!(
            matches!(r, Reply::Int(_) | Reply::Arr(_)),
            "{doc}: a waiting example was not granted: {r:?}"
        );
    }
    assert!(checked >= at_least, "{doc}: only {checked} replies checked");
}

#[test]
fn readme_tour_runs_in_order_on_a_fresh_server() {
    run_document("README.md", 4);
}

#[test]
fn command_reference_examples_run_in_order_on_a_fresh_server() {
    run_document("docs/COMMANDS.md", 8);
}

#[test]
fn operations_acl_example_runs_on_a_fresh_server() {
    run_document("docs/OPERATIONS.md", 2);
}
