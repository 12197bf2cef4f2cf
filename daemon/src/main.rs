//! The `tetherd` binary: parses arguments, sets up logging, runs the daemon.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// The tether daemon: holds sessions and serves them over a Unix socket.
#[derive(Debug, Parser)]
#[command(name = "tetherd", version)]
struct Args {
    /// Socket to listen on (default: $TETHER_SOCKET, $XDG_RUNTIME_DIR/tether/tetherd.sock, or
    /// /tmp/tether-$UID/tetherd.sock).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Data directory (default: $TETHER_HOME, or $XDG_DATA_HOME/tether).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Start a new session (setsid) so the daemon outlives the terminal that started it.
    #[arg(long)]
    detach: bool,
    /// Print `ready <socket>` on stdout once the socket accepts connections.
    #[arg(long)]
    print_ready: bool,
    /// Log format on stderr: text (default) or json.
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    log_format: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.detach {
        // Fails only if we already lead a process group, in which case we are detached enough.
        let _ = nix::unistd::setsid();
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("TETHER_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_env("RUST_LOG"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format.as_str() {
        "json" => log.json().init(),
        "text" => log.init(),
        other => {
            eprintln!("tetherd: unknown --log-format {other:?} (use text or json)");
            return ExitCode::FAILURE;
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tetherd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = tether_daemon::Options {
        socket: args.socket,
        data_dir: args.data_dir,
        print_ready: args.print_ready,
    };
    match runtime.block_on(tether_daemon::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tetherd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
