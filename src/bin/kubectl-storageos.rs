//! `kubectl storageos`: a thin entry point. Rewrite the Go plugin's flags, parse the command
//! line, run the command in the library (`storageos_operator::plugin`), print its error and exit
//! non-zero when it fails.

use std::process::ExitCode;

use clap::Parser;
use storageos_operator::plugin;

fn main() -> ExitCode {
    let translated = match plugin::go_flags::translate(std::env::args_os()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            // clap's exit code for a usage error.
            return ExitCode::from(2);
        }
    };
    for notice in &translated.notices {
        eprintln!("{notice}");
    }
    let cli = plugin::Cli::parse_from(translated.args);
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
