//! `kubectl storageos`: a thin entry point. Parse the command line, run the command in the
//! library (`storageos_operator::plugin`), print its error and exit non-zero when it fails.

use std::process::ExitCode;

use clap::Parser;
use storageos_operator::plugin;

fn main() -> ExitCode {
    let cli = plugin::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(plugin::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
