//! The README's headline table, made from the `figure` lines of a run's section (the same text
//! `make bench-docs` puts in docs/BENCHMARKS.md), so the two documents cannot disagree.

pub const START: &str = "<!-- bench-headline:start -->";
pub const END: &str = "<!-- bench-headline:end -->";

/// (row, scenario, metric, unit, note): dlock's `native` median against Redisson's `lua`.
const ROWS: &[(&str, &str, &str, &str, &str)] = &[
    (
        "one lock cycle after another, one client",
        "uncontended",
        "locks/s",
        "/s",
        "",
    ),
    (
        "hot lock: hand-offs between clients",
        "hot-lock",
        "handoffs/s",
        "/s",
        "Lua's grants mostly go back to the client that just released",
    ),
    (
        "release → next holder's reply (p50)",
        "handoff",
        "p50_us",
        " µs",
        "",
    ),
    (
        "one watchdog round over 10 000 locks",
        "renew-10000",
        "round_ms",
        " ms",
        "",
    ),
    (
        "serve 10 000 queued waiters",
        "waiters",
        "serve_s",
        " s",
        "",
    ),
];

/// The median of `figure <scenario> <backend> <metric> <median> ...` in `section`.
fn figure(section: &str, scenario: &str, backend: &str, metric: &str) -> Option<f64> {
    section.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        (w.len() >= 5 && w[0] == "figure" && w[1..4] == [scenario, backend, metric])
            .then(|| w[4].parse().ok())
            .flatten()
    })
}

/// Two significant digits below 100, three above, thousands separated by a space: 47 500,
/// 3 040, 80, 14, 0.31.
fn round(v: f64) -> String {
    if v <= 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = if v >= 100.0 { 3 } else { 2 };
    let magnitude = v.log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).max(0) as usize;
    let scale = 10f64.powi(digits - 1 - magnitude);
    let r = (v * scale).round() / scale;
    // 9.96 rounds to 10: count the decimals of the rounded value.
    let decimals = decimals.min((digits - 1 - r.log10().floor() as i32).max(0) as usize);
    let text = format!("{r:.decimals$}");
    if decimals > 0 {
        return text;
    }
    let mut grouped = String::new();
    for (i, c) in text.chars().enumerate() {
        if i > 0 && (text.len() - i) % 3 == 0 {
            grouped.push(' ');
        }
        grouped.push(c);
    }
    grouped
}

/// The table with its first line (the run's date and machine), or the first figure missing.
pub fn table(section: &str) -> Result<String, String> {
    let run = section
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("Last `make bench` run: "))
        .and_then(|l| l.split(';').next())
        .ok_or("the section has no `Last make bench run:` line")?;
    let mut out = format!(
        "`make bench` against Redisson's Lua scripts on a plain Redis (run of {run}; medians; \
         every figure, the machine and the method in [docs/BENCHMARKS.md](docs/BENCHMARKS.md), \
         from which `make bench-docs` writes this table):\n\n\
         | | dlock | Redisson's Lua | |\n|---|---|---|---|\n"
    );
    for (row, scenario, metric, unit, note) in ROWS {
        let get = |backend| {
            figure(section, scenario, backend, metric)
                .ok_or(format!("no figure {scenario} {backend} {metric}"))
        };
        let (native, lua) = (get("native")?, get("lua")?);
        out.push_str(&format!(
            "| {row} | {}{unit} | {}{unit} | {note} |\n",
            round(native),
            round(lua)
        ));
    }
    Ok(out)
}

/// `text` with the part between the markers replaced by `table`.
pub fn replace(text: &str, table: &str) -> Result<String, String> {
    match (text.find(START), text.find(END)) {
        (Some(a), Some(b)) if a < b => Ok(format!("{}{START}\n{table}{}", &text[..a], &text[b..])),
        _ => Err(format!("README.md has no {START} ... {END} markers")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf()
    }

    #[test]
    fn rounding() {
        let got: Vec<String> = [
            47522.0,
            3043.0,
            9.94,
            9.96,
            79.99,
            13.92,
            0.308,
            191.6,
            1_506_934.0,
        ]
        .iter()
        .map(|v| round(*v))
        .collect();
        assert_eq!(
            got,
            [
                "47 500",
                "3 040",
                "9.9",
                "10",
                "80",
                "14",
                "0.31",
                "192",
                "1 510 000"
            ]
        );
    }

    /// The README's table is the one the committed docs/BENCHMARKS.md run gives: fails when
    /// either is edited by hand without the other (`make bench-docs` rewrites both).
    #[test]
    fn readme_headline_matches_benchmarks_md() {
        let doc = std::fs::read_to_string(root().join("docs/BENCHMARKS.md")).unwrap();
        let section = doc
            .split_once("<!-- bench:start -->\n")
            .and_then(|(_, rest)| rest.split_once("<!-- bench:end -->"))
            .expect("markers in docs/BENCHMARKS.md")
            .0;
        let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
        let expected = replace(&readme, &table(section).unwrap()).unwrap();
        assert!(
            readme == expected,
            "README.md's benchmark table differs from docs/BENCHMARKS.md: run `make bench-docs`"
        );
    }
}
