//! `talon-process`: what every Talon process does at start and stop, written once for
//! `talon` and each part's own binary: logs to stderr filtered by `TALON_LOG`, the
//! allocator's thresholds ([`tune_allocator`]), the ready file a script waits for, and
//! the signals a process drains on.
//!
//! It does not own any part's configuration or serving: each part's `cli` module
//! (`talon_gateway::cli`, `talon_worker::cli`, ...) parses its flags and runs it, and
//! calls these at the same points.

mod allocator;

pub use allocator::{AllocatorTuning, MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES, tune_allocator};

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where every command's logs go and how to choose them: the end of each `--help`.
pub const LOG_HELP: &str = "Logs go to stderr. TALON_LOG sets their filter (a tracing filter: \
info by default; e.g. TALON_LOG=debug, TALON_LOG=warn or TALON_LOG=talon_gateway=debug; \
debug keeps the HTTP libraries at info unless named, as in TALON_LOG=debug,hyper_util=debug); \
a filter that does not parse is said once and info is used.";

/// Starts logging to stderr, filtered by `TALON_LOG` (a `tracing` filter such as
/// `info` or `talon_gateway=debug`; `info` when unset). Colours only for a person at a
/// terminal. A second call does nothing (a test or an embedding program may have
/// started logging first).
pub fn init_logs() {
    let filter = match std::env::var("TALON_LOG") {
        Ok(spec) => {
            tracing_subscriber::EnvFilter::try_new(quiet_libraries(&spec)).unwrap_or_else(|e| {
                // Said once, not silently ignored: the person asked for other logs.
                eprintln!("talon: TALON_LOG={spec:?} is not a log filter ({e}); logging at info");
                tracing_subscriber::EnvFilter::new("info")
            })
        }
        Err(_) => tracing_subscriber::EnvFilter::new("info"),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .try_init();
}

/// The HTTP libraries Talon is built on, whose debug lines (a connection pool's every
/// reuse) would bury Talon's own.
const NOISY_LIBRARIES: [&str; 4] = ["hyper", "hyper_util", "h2", "reqwest"];

/// `spec` with the HTTP libraries kept at `info` when it asks for `debug` or `trace`
/// everywhere and does not name them itself: `TALON_LOG=debug` shows Talon's debug
/// lines, `TALON_LOG=debug,hyper_util=debug` the libraries' too.
fn quiet_libraries(spec: &str) -> String {
    let mut out = spec.to_owned();
    let verbose = spec
        .split(',')
        .any(|d| matches!(d.trim().to_ascii_lowercase().as_str(), "debug" | "trace"));
    if !verbose {
        return out;
    }
    for library in NOISY_LIBRARIES {
        let named = spec
            .split(',')
            .any(|d| d.trim().split(['=', '[', ':']).next() == Some(library));
        if !named {
            out.push_str(&format!(",{library}=info"));
        }
    }
    out
}

/// Writes `body` as JSON to `path` through a temporary file beside it and a rename,
/// so a reader that waits for the file never sees it half written.
///
/// # Errors
/// The I/O error of writing or renaming.
pub fn write_ready_file(path: &Path, body: &serde_json::Value) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, serde_json::to_vec_pretty(body)?)?;
    std::fs::rename(&tmp, path)
}

/// The end of a command that failed: its error as one line on stderr, each cause once
/// (`program: what failed: why`), and a failing exit status. No backtrace, whatever
/// `RUST_BACKTRACE` says: the person reading it made a configuration mistake, and the
/// line must say which.
pub fn exit_with_error(program: &str, error: &(dyn std::error::Error + 'static)) -> ExitCode {
    eprintln!("{program}: {}", error_line(error));
    ExitCode::FAILURE
}

/// An error and its causes as one line ([`talon_core::error_line`]).
pub use talon_core::error_line;

/// Resolves on SIGINT (Ctrl-C) or SIGTERM: what a Talon process drains and exits on.
/// A signal that cannot be listened for is logged and never resolves by itself.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn debug_everywhere_keeps_the_http_libraries_at_info_unless_named() {
        use super::quiet_libraries;
        assert_eq!(
            quiet_libraries("debug"),
            "debug,hyper=info,hyper_util=info,h2=info,reqwest=info"
        );
        assert_eq!(
            quiet_libraries("trace,hyper_util=debug"),
            "trace,hyper_util=debug,hyper=info,h2=info,reqwest=info"
        );
        assert_eq!(quiet_libraries("warn"), "warn");
        assert_eq!(
            quiet_libraries("talon_gateway=debug"),
            "talon_gateway=debug"
        );
    }

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);
    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn an_error_line_names_each_cause_once() {
        let io = Layer("File exists (os error 17)", None);
        let store = Layer(
            "creating /tmp/d: File exists (os error 17)",
            Some(Box::new(io)),
        );
        let top = Layer("starting the origin", Some(Box::new(store)));
        assert_eq!(
            error_line(&top),
            "starting the origin: creating /tmp/d: File exists (os error 17)"
        );
        let multi = Layer("first\nsecond", None);
        assert_eq!(error_line(&multi), "first second");
    }

    #[test]
    fn the_ready_file_is_whole_json_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ready.json");
        write_ready_file(&path, &serde_json::json!({"url": "http://127.0.0.1:1"})).unwrap();
        let read: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(read["url"], "http://127.0.0.1:1");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("ready.json")]);
    }
}
