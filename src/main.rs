use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;
use wsync::agent::AgentArgs;

#[derive(Parser, Debug)]
#[command(name = "wsync", version, about = "Keeps cloud development workspaces in step with a control plane")]
struct Cli {
    /// Log format.
    #[arg(long, global = true, env = "WSYNC_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the in-cluster agent.
    Agent(Box<AgentArgs>),
    /// Print the CustomResourceDefinitions as YAML.
    Crd,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).init(),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match wsync::crd::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        },
        Command::Agent(args) => {
            init_logging(cli.log_format);
            wsync::install_crypto_provider();
            match wsync::agent::run(*args).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!(%error, "agent failed");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
