//! The `tetherd` binary: reads the configuration, sets up logging, runs the daemon (or prints
//! its configuration, or checks its health).

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tether_daemon::config::{self, Config};
use tether_daemon::telemetry::Telemetry;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The tether daemon: holds sessions and serves them over a Unix socket.
#[derive(Debug, Parser)]
#[command(name = "tetherd", version)]
struct Args {
    /// Socket to listen on (default: $TETHER_SOCKET, $XDG_RUNTIME_DIR/tether/tetherd.sock, or
    /// /tmp/tether-$UID/tetherd.sock).
    #[arg(long, value_name = "PATH", global = true)]
    socket: Option<PathBuf>,
    /// Data directory (default: $TETHER_HOME, or $XDG_DATA_HOME/tether).
    #[arg(long, value_name = "DIR", global = true)]
    data_dir: Option<PathBuf>,
    /// Configuration file (default: $TETHER_CONFIG, or ~/.config/tether/config.toml).
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// Override a configuration key, e.g. `--set idle_unload=1h` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    set: Vec<String>,
    /// Start a new session (setsid) so the daemon outlives the terminal that started it.
    #[arg(long)]
    detach: bool,
    /// Print `ready <socket>` on stdout once the socket accepts connections.
    #[arg(long)]
    print_ready: bool,
    /// Log format on stderr: text or json (the `log.format` key).
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Print the effective configuration and where each value comes from.
    Config {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check what the daemon needs: configuration, data directory, credentials, git, the API.
    Doctor {
        /// Also contact the API (a free `GET /v1/models`).
        #[arg(long)]
        online: bool,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Inside the Bash sandbox: forward a loopback port to the session's network proxy.
    #[command(hide = true)]
    SandboxRelay {
        /// The address to listen on (`127.0.0.1:PORT`).
        #[arg(long, value_name = "ADDR")]
        listen: std::net::SocketAddr,
        /// The proxy's Unix socket.
        #[arg(long, value_name = "PATH")]
        to: PathBuf,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Runs in the sandbox: no configuration, no logging, nothing but the relay.
    if let Some(Sub::SandboxRelay { listen, to }) = &args.command {
        return match tether_daemon::sandbox::proxy::relay(*listen, to) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tetherd sandbox-relay: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut flags = args.set.clone();
    if let Some(f) = &args.log_format {
        flags.push(format!("log.format={f}"));
    }
    let file = args.config.clone().or_else(config::default_path);
    let config = match Config::load(file.as_deref(), &config::process_env, &flags) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("tetherd: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    let paths = tether_proto::paths::PathEnv::from_process(nix::unistd::getuid().as_raw());
    let data_dir = args.data_dir.clone().unwrap_or_else(|| paths.data_dir());
    match args.command {
        Some(Sub::Config { json }) => return print_config(&config, json),
        Some(Sub::Doctor { online, json }) => return doctor(&config, &data_dir, online, json),
        Some(Sub::SandboxRelay { .. }) | None => {}
    }
    if args.detach {
        // Fails only if we already lead a process group, in which case we are detached enough.
        let _ = nix::unistd::setsid();
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tetherd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The gRPC exporter needs the runtime while it is built.
    let telemetry = {
        let _in_runtime = runtime.enter();
        match Telemetry::init(
            config.flag("telemetry.enabled"),
            &config.string("telemetry.endpoint").unwrap_or_default(),
        ) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("tetherd: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    let (telemetry, tracer) = match telemetry {
        Some((t, tracer)) => (Some(t), Some(tracer)),
        None => (None, None),
    };
    let _log_guard = match init_logging(&config, &data_dir, args.detach, tracer) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tetherd: {e}");
            return ExitCode::FAILURE;
        }
    };
    if telemetry.is_some() {
        tracing::info!("exporting traces and metrics over OTLP");
    }
    let options = tether_daemon::Options {
        socket: args.socket,
        data_dir: Some(data_dir),
        print_ready: args.print_ready,
        config,
    };
    let result = runtime.block_on(tether_daemon::run(options));
    if let Some(t) = telemetry {
        t.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tetherd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Lines the log file's writer holds before it drops new ones.
const LOG_QUEUE_LINES: usize = 8 * 1024;

type BoxedLayer = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;

/// stderr (text or JSON; journald reads it under systemd) and, when not under systemd, a
/// daily-rotated file in `<data dir>/logs`. Returns the guard that flushes the file on exit.
fn init_logging(
    config: &Config,
    data_dir: &std::path::Path,
    detached: bool,
    tracer: Option<tether_daemon::telemetry::Tracer>,
) -> anyhow::Result<Option<tracing_appender::non_blocking::WorkerGuard>> {
    let level = config.string("log.level").unwrap_or_else(|| "info".into());
    // rmcp logs every message it handles at info; its warnings are what a user needs.
    let level = if level.contains("rmcp") {
        level
    } else {
        format!("{level},rmcp=warn")
    };
    let filter = || tracing_subscriber::EnvFilter::new(&level);
    let json = config.string("log.format").as_deref() == Some("json");
    let under_systemd =
        std::env::var_os("INVOCATION_ID").is_some() || std::env::var_os("JOURNAL_STREAM").is_some();
    let to_file = match config.string("log.file").as_deref() {
        Some("on") => true,
        Some("off") => false,
        _ => !under_systemd,
    };
    let mut layers: Vec<BoxedLayer> = Vec::new();
    let mut guard = None;
    if to_file {
        let dir = data_dir.join("logs");
        tether_proto::private::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        let keep = config.number("log.keep_days").unwrap_or(7.0).max(1.0) as usize;
        let appender = tracing_appender::rolling::Builder::new()
            .rotation(tracing_appender::rolling::Rotation::DAILY)
            .filename_prefix("tetherd")
            .filename_suffix("log")
            .max_log_files(keep)
            .build(data_dir.join("logs"))
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot open the log in {}: {e}",
                    data_dir.join("logs").display()
                )
            })?;
        // The writer's queue is allocated and written whole up front (128k lines, 4 MB, by
        // default); 8k lines hold any burst the log levels in use produce.
        let (writer, g) = tracing_appender::non_blocking::NonBlockingBuilder::default()
            .buffered_lines_limit(LOG_QUEUE_LINES)
            .finish(PrivateLog::new(appender, dir));
        guard = Some(g);
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(false);
        layers.push(if json {
            layer.json().with_filter(filter()).boxed()
        } else {
            layer.with_filter(filter()).boxed()
        });
    }
    // A detached daemon's stderr is a file the client opened; the rotating log has it all.
    if !(detached && to_file) {
        let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        layers.push(if json {
            layer.json().with_filter(filter()).boxed()
        } else {
            layer.with_filter(filter()).boxed()
        });
    }
    if let Some(tracer) = tracer {
        layers.push(tether_daemon::telemetry::span_layer(tracer).boxed());
    }
    tracing_subscriber::registry().with(layers).init();
    Ok(guard)
}

fn print_config(config: &Config, json: bool) -> ExitCode {
    let report = tether_proto::ConfigReport {
        file: config.file.as_ref().map(|f| f.display().to_string()),
        entries: config.entries(),
    };
    if !json {
        print!("{}", report.render());
        return ExitCode::SUCCESS;
    }
    match serde_json::to_string_pretty(&report) {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tetherd: {e}");
            ExitCode::FAILURE
        }
    }
}

fn doctor(config: &Config, data_dir: &std::path::Path, online: bool, json: bool) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tetherd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let checks = runtime.block_on(async {
        let env = tether_daemon::daemon::turn_env(config, data_dir);
        match &env {
            Ok(env) => {
                let llm = env.llm.as_deref().map_err(String::as_str);
                tether_daemon::doctor::checks(config, data_dir, llm, online).await
            }
            Err(e) => {
                let why = e.to_string();
                tether_daemon::doctor::checks(config, data_dir, Err(why.as_str()), online).await
            }
        }
    });
    if json {
        match serde_json::to_string(&checks) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("tetherd: {e}"),
        }
    } else {
        for c in &checks {
            println!("{:<5} {:<15} {}", c.status.as_str(), c.name, c.detail);
        }
    }
    if checks
        .iter()
        .any(|c| c.status == tether_proto::CheckStatus::Fail)
    {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The rolling log file, kept private: the appender creates each day's file with the process
/// umask, so the log directory (0700 itself) is tightened at the first write after a rotation
/// could have happened.
struct PrivateLog {
    inner: tracing_appender::rolling::RollingFileAppender,
    dir: std::path::PathBuf,
    next_check: std::time::Instant,
}

impl PrivateLog {
    fn new(inner: tracing_appender::rolling::RollingFileAppender, dir: std::path::PathBuf) -> Self {
        Self {
            inner,
            dir,
            next_check: std::time::Instant::now(),
        }
    }
}

impl std::io::Write for PrivateLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        let now = std::time::Instant::now();
        if now >= self.next_check {
            tether_proto::private::tighten(&self.dir);
            self.next_check = now + std::time::Duration::from_secs(10);
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
