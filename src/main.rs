//! Thin entry point: parse the command line, start logging (and tracing), hand over to the
//! library, flush the last spans.

use std::process::ExitCode;

use clap::Parser;
use storageos_operator::{app, cli, telemetry};

fn main() -> ExitCode {
    let args = cli::normalize_go_flags(std::env::args());
    let cli = cli::Cli::parse_from(args);
    match app::runtime(&cli.command) {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: cli::Cli) -> ExitCode {
    let telemetry = match telemetry::init(cli.log_format, &cli.log_level, cli.command.trace_service()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = app::run(cli).await;
    telemetry.shutdown().await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
