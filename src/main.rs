//! Thin entry point: parse the command line, start logging, hand over to the library.

use std::process::ExitCode;

use clap::Parser;
use storageos_operator::{app, cli, telemetry};

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::normalize_go_flags(std::env::args());
    let cli = cli::Cli::parse_from(args);
    if let Err(e) = telemetry::init(cli.log_format, &cli.log_level) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    match app::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
