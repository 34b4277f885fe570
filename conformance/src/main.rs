//! `dlock-conformance`: run the client conformance scenarios with a client's driver.

use std::path::PathBuf;

use clap::Parser;

/// Run the dlock client conformance scenarios against real servers, with one driver
/// process per actor (see conformance/README.md).
#[derive(Parser)]
#[command(name = "dlock-conformance")]
struct Args {
    /// The driver's command line, e.g. 'target/release/driver_rust'.
    #[arg(long)]
    driver: String,
    /// The client's name in the report and in scenarios' skip lists (default: guessed
    /// from the driver's command line: python, node, else rust).
    #[arg(long)]
    client: Option<String>,
    /// Run only the scenario of this name.
    #[arg(long)]
    only: Option<String>,
    /// How many scenarios run at once (each starts its own servers and drivers).
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Print the summary as one JSON object (after the report).
    #[arg(long)]
    json: bool,
    /// Scenario files or directories (default: the scenarios folder of this crate).
    paths: Vec<PathBuf>,
}

fn main() {
    let args = Args::parse();
    let client = args.client.unwrap_or_else(|| {
        let d = args.driver.to_ascii_lowercase();
        if d.contains("python") {
            "python".into()
        } else if d.contains("node") {
            "node".into()
        } else {
            "rust".into()
        }
    });
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios")]
    } else {
        args.paths
    };
    let files = match dlock_conformance::scenario_files(&paths) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("dlock-conformance: {e}");
            std::process::exit(2);
        }
    };
    let opts = dlock_conformance::Options {
        driver: args.driver,
        client,
        only: args.only,
        jobs: args.jobs,
    };
    let summary = dlock_conformance::run_files(&opts, &files);
    print!("{}", summary.report());
    if args.json {
        println!("{}", summary.to_json());
    }
    std::process::exit(i32::from(summary.failed > 0));
}
