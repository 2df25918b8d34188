use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;
use wsync::agent::AgentArgs;
use wsync::cli::{AgentsCommand, ServerArgs, WorkspacesCommand};

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
    /// Run the reference control plane.
    ControlPlane(Box<wsync::control_plane::ControlPlaneArgs>),
    /// Register agents with the control plane.
    Agents {
        #[command(flatten)]
        server: ServerArgs,
        #[command(subcommand)]
        command: AgentsCommand,
    },
    /// Create, list and drive workspaces through the control plane.
    Workspaces {
        #[command(flatten)]
        server: ServerArgs,
        /// The agent whose workspaces these are.
        #[arg(long, env = "WSYNC_AGENT_ID", global = true)]
        agent: Option<String>,
        #[command(subcommand)]
        command: WorkspacesCommand,
    },
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
            exit(wsync::agent::run(*args).await)
        }
        Command::ControlPlane(args) => {
            init_logging(cli.log_format);
            wsync::install_crypto_provider();
            exit(wsync::control_plane::run(*args).await)
        }
        Command::Agents { server, command } => {
            wsync::install_crypto_provider();
            report(wsync::cli::agents(&server, command).await)
        }
        Command::Workspaces { server, agent, command } => {
            wsync::install_crypto_provider();
            let Some(agent) = agent else {
                eprintln!("error: --agent <ID> (or WSYNC_AGENT_ID) is required");
                return ExitCode::from(2);
            };
            report(wsync::cli::workspaces(&server, &agent, command).await)
        }
    }
}

fn exit(result: wsync::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "exiting");
            ExitCode::FAILURE
        }
    }
}

/// CLI errors go to stderr as plain text.
fn report(result: wsync::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
