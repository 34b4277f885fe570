//! `INFO` fields, read the one way every test reads them.

use std::collections::HashMap;

use redis::Connection;

/// The text of `INFO <section>` (panics if the server does not answer).
fn info_text(con: &mut Connection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(con)
        .unwrap_or_else(|e| panic!("INFO {section}: {e}"))
}

/// The `name:value` lines of an `INFO` text (section headers and blank lines left out).
fn fields(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k, v.trim()))
}

/// One `INFO <section>` field as text (`None` when absent or when INFO fails, e.g. while the
/// server is still loading).
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> Option<String> {
    let text: String = redis::cmd("INFO").arg(section).query(con).ok()?;
    let value = fields(&text)
        .find(|(k, _)| *k == field)
        .map(|(_, v)| v.to_string());
    value
}

/// One `INFO <section>` field as an integer.
pub fn info_int(con: &mut Connection, section: &str, field: &str) -> Option<i64> {
    info_field(con, section, field)?.parse().ok()
}

/// Every field of one `INFO` section, as name -> text, read at one moment.
pub fn info_fields(con: &mut Connection, section: &str) -> HashMap<String, String> {
    let text = info_text(con, section);
    fields(&text)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every integer field of one `INFO` section, as name -> value.
pub fn info_section(con: &mut Connection, section: &str) -> HashMap<String, i64> {
    info_fields(con, section)
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect()
}

/// `used_memory` from `INFO memory`, in bytes.
pub fn used_memory(con: &mut Connection) -> i64 {
    info_int(con, "memory", "used_memory").expect("INFO memory used_memory")
}
