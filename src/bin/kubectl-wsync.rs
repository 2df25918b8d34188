//! `kubectl wsync …`: kubectl finds this binary by its name on the PATH (`kubectl plugin list`).

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = wsync::kubectl_plugin::Args::parse();
    wsync::runtime::install_crypto_provider();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(wsync::kubectl_plugin::run(args)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
