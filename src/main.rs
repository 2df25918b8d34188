use clap::{Parser, Subcommand};
use std::process::ExitCode;
use wsync::agent::AgentArgs;
use wsync::cli::agents::AgentsCommand;
use wsync::cli::{ServerArgs, WorkspacesCommand};
use wsync::runtime::{LogFormat, init_logging, install_crypto_provider};

/// jemalloc unless built with `--no-default-features` (Cargo.toml, BENCHMARKS.md). Its own
/// thread returns freed pages to the OS a second after they are freed.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`.
#[cfg(feature = "jemalloc")]
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: Option<&'static std::ffi::c_char> =
    // SAFETY: a pointer to a NUL-terminated static string, as jemalloc expects.
    Some(unsafe { &*c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr() });

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
    ControlPlane(Box<wsync::control_plane::ControlPlaneCommand>),
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
    /// Users (admins): create one with a first token, list, disable, enable, delete.
    Users {
        #[command(flatten)]
        server: ServerArgs,
        #[command(subcommand)]
        command: wsync::cli::people::UsersCommand,
    },
    /// Your personal API tokens.
    Tokens {
        #[command(flatten)]
        server: ServerArgs,
        #[command(subcommand)]
        command: wsync::cli::people::TokensCommand,
    },
    /// The audit trail: every write, newest first (a user sees their own).
    Audit {
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        args: wsync::cli::people::AuditArgs,
    },
    /// Who the token you give is.
    Whoami {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Print the CustomResourceDefinitions as YAML.
    Crd,
}

fn main() -> ExitCode {
    // Before the runtime's threads: arenas are made per thread.
    wsync::allocator::configure_allocator();
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(run()),
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> ExitCode {
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
            let log_level = init_logging(cli.log_format);
            install_crypto_provider();
            exit(wsync::agent::run(*args, log_level).await, wsync::agent::error::Error::reason)
        }
        Command::ControlPlane(command) => match command.maintenance {
            Some(maintenance) => report(wsync::control_plane::maintenance::run(maintenance)),
            None => {
                init_logging(cli.log_format);
                install_crypto_provider();
                exit(wsync::control_plane::run(command.serve).await, wsync::control_plane::error::Error::reason)
            }
        },
        Command::Agents { server, command } => {
            install_crypto_provider();
            report(wsync::cli::agents::agents(&server, command).await)
        }
        Command::Workspaces { server, agent, command } => {
            install_crypto_provider();
            report(wsync::cli::workspaces(&server, agent.as_deref(), command).await)
        }
        Command::Users { server, command } => {
            install_crypto_provider();
            report(wsync::cli::people::users(&server, command).await)
        }
        Command::Tokens { server, command } => {
            install_crypto_provider();
            report(wsync::cli::people::tokens(&server, command).await)
        }
        Command::Audit { server, args } => {
            install_crypto_provider();
            report(wsync::cli::people::audit(&server, args).await)
        }
        Command::Whoami { server } => {
            install_crypto_provider();
            report(wsync::cli::people::whoami(&server).await)
        }
    }
}

/// A half's error is logged with its reason, which a log search can key on.
fn exit<E: std::fmt::Display>(result: Result<(), E>, reason: fn(&E) -> &'static str) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, reason = reason(&error), "exiting");
            ExitCode::FAILURE
        }
    }
}

/// CLI errors go to stderr as plain text.
fn report<E: std::fmt::Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
