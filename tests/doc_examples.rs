//! The redis-cli examples of README.md, docs/COMMANDS.md and docs/OPERATIONS.md, run in the
//! order they appear, each document against its own fresh server: every command line
//! (`127.0.0.1:6379> ...` or `$ redis-cli ...` inside a code block) is sent, and the reply the
//! document shows after it is compared with the server's, rendered as redis-cli prints it.
//! A command with `WAIT` blocks, so it goes on its own connection and the document goes on;
//! a later code block of reply lines only (a second terminal's output) is that command's
//! reply, compared when it comes.
//!
//! What a document shows at one moment may differ in its times: an integer of 1000 or more
//! (a lease or delay left, in ms) matches within 5%. README.md is compared in full (every
//! reply it shows, strings and nested arrays too: its tour cannot drift); the reference
//! documents compare the replies they show as integers, nils or lists of them.

use crate::common;

use std::time::Duration;

use common::*;

/// One step of a document: a command with the reply lines shown after it, or a code block
/// of reply lines alone (what a waiting command printed in another terminal).
enum Step {
    Command(Vec<String>, Vec<String>),
    LateReply(Vec<String>),
}

/// The steps of a document's code blocks.
fn examples(doc: &str) -> Vec<Step> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(doc);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let mut out: Vec<Step> = vec![];
    let mut in_block = false;
    let mut block_has_command = false;
    let mut loose: Vec<String> = vec![];
    for line in text.lines() {
        if line.starts_with("```") {
            if in_block
                && !block_has_command
                && !loose.is_empty()
                && loose.iter().all(|l| is_reply_line(l))
            {
                out.push(Step::LateReply(std::mem::take(&mut loose)));
            }
            in_block = !in_block;
            block_has_command = false;
            loose.clear();
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
        match (command, out.last_mut()) {
            (Some(c), _) => {
                out.push(Step::Command(
                    c.split_whitespace().map(String::from).collect(),
                    vec![],
                ));
                block_has_command = true;
            }
            (None, Some(Step::Command(_, shown))) if block_has_command => {
                shown.push(line.to_string())
            }
            (None, _) => {
                if !line.is_empty() {
                    loose.push(line.to_string());
                }
            }
        }
    }
    out
}

/// A line of redis-cli output (`1) (integer) 1`, `"text"`, `(nil)`, ...), not code or prose.
fn is_reply_line(line: &str) -> bool {
    let rest = match line.split_once(") ") {
        Some((n, rest)) if n.parse::<u32>().is_ok() => rest,
        _ => line,
    };
    rest.starts_with('(') || rest.starts_with('"') || rest.starts_with(|c: char| c.is_ascii_digit())
}

/// A reply as redis-cli prints it, one line per element (nested arrays indented).
fn cli_lines(reply: &Reply) -> Vec<String> {
    match reply {
        Reply::Int(n) => vec![format!("(integer) {n}")],
        Reply::Nil => vec!["(nil)".to_string()],
        Reply::Bulk(s) => vec![format!("{s:?}")],
        Reply::Status(s) => vec![s.clone()],
        Reply::Err(e) => vec![format!("(error) {e}")],
        Reply::Bool(b) => vec![format!("({})", if *b { "true" } else { "false" })],
        Reply::Double(d) => vec![format!("(double) {d}")],
        Reply::Arr(items) if items.is_empty() => vec!["(empty array)".to_string()],
        Reply::Arr(items) => {
            let mut out = vec![];
            for (i, item) in items.iter().enumerate() {
                let prefix = format!("{}) ", i + 1);
                for (j, line) in cli_lines(item).into_iter().enumerate() {
                    let lead = if j == 0 {
                        prefix.clone()
                    } else {
                        " ".repeat(prefix.len())
                    };
                    out.push(format!("{lead}{line}"));
                }
            }
            out
        }
        other => vec![format!("{other:?}")],
    }
}

/// Whitespace-separated words: the documents lay long replies out in columns.
fn words(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .flat_map(|l| l.split_whitespace().map(String::from))
        .collect()
}

/// Whether the reply a document shows is the server's, times within 5%.
fn same_reply(shown: &[String], actual: &Reply) -> bool {
    let (shown, actual) = (words(shown), words(&cli_lines(actual)));
    shown.len() == actual.len()
        && shown.iter().zip(&actual).enumerate().all(|(i, (s, a))| {
            if s == a {
                return true;
            }
            let after_integer = i > 0 && actual[i - 1] == "(integer)";
            match (s.parse::<i64>(), a.parse::<i64>()) {
                (Ok(s), Ok(a)) if after_integer && s >= 1000 => (s - a).abs() * 20 <= s,
                _ => false,
            }
        })
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

/// How much of a document's replies is compared.
#[derive(Clone, Copy, PartialEq)]
enum Compare {
    /// Every reply the document shows.
    All,
    /// Only replies shown as integers, nils or lists of them.
    Simple,
}

fn run_document(doc: &str, compare: Compare, at_least: usize) {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut blocked = std::collections::VecDeque::new();
    let mut checked = 0;
    let mut check = |what: &str, shown: &[String], reply: &Reply| {
        let shown: Vec<String> = shown.iter().filter(|l| !l.is_empty()).cloned().collect();
        if shown.is_empty() || (compare == Compare::Simple && !shown.iter().all(|l| is_simple(l))) {
            return;
        }
        assert!(
            same_reply(&shown, reply),
            "{doc}: {what} answered\n{}\nwhere the document shows\n{}",
            cli_lines(reply).join("\n"),
            shown.join("\n")
        );
        checked += 1;
    };
    for step in examples(doc) {
        let (command, shown) = match step {
            Step::Command(command, shown) => (command, shown),
            Step::LateReply(shown) => {
                // Output shown without a command: only a waiting command's counts.
                let Some((command, pending)) = blocked.pop_front() else {
                    continue;
                };
                let pending: Pending = pending;
                let command: String = command;
                let (r, _) = pending.wait(Duration::from_secs(10));
                check(&command, &shown, &r);
                continue;
            }
        };
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        if args.iter().any(|a| a.eq_ignore_ascii_case("WAIT")) {
            let key = args[1].to_string();
            let before = waiters(&mut c, &key);
            blocked.push_back((command.join(" "), spawn_cmd(&srv, &args)));
            // The documents' waits are on held locks: queued before the document goes on.
            wait_for(Duration::from_secs(10), "the WAIT queued", || {
                (waiters(&mut c, &key) > before).then_some(())
            });
            continue;
        }
        let reply = cmd(&mut c, &args);
        check(&command.join(" "), &shown, &reply);
    }
    for (command, b) in blocked {
        let (r, _) = b.wait(Duration::from_secs(10));
        assert!(
            matches!(r, Reply::Int(_) | Reply::Arr(_)),
            "{doc}: {command} was not granted: {r:?}"
        );
    }
    assert!(checked >= at_least, "{doc}: only {checked} replies checked");
}

#[test]
fn readme_tour_runs_in_order_on_a_fresh_server() {
    run_document("README.md", Compare::All, 6);
}

#[test]
fn command_reference_examples_run_in_order_on_a_fresh_server() {
    run_document("docs/COMMANDS.md", Compare::Simple, 8);
}

#[test]
fn operations_acl_example_runs_on_a_fresh_server() {
    run_document("docs/OPERATIONS.md", Compare::Simple, 2);
}
