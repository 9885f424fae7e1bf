//! Structured logs (`--log-format text|json`, `--log-level`).
//!
//! Levels: `info` (the default) logs one line per upstream state change (reflector synced, watch restarted,
//! relist, backoff, caching started/stopped) and never one line per request; `debug` adds per-request and
//! per-connection detail. `RUST_LOG`, when set, overrides `--log-level` with full `EnvFilter` directives.

use std::fmt;
use std::str::FromStr;

use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The default `--log-level`.
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log pipelines).
    Json,
}

impl FromStr for LogFormat {
    type Err = LogError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(LogError::Format(other.to_owned())),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// `--log-format` is neither `text` nor `json`.
    #[error("unknown log format {0:?} (expected text or json)")]
    Format(String),
    /// `--log-level` / `RUST_LOG` is not a valid filter.
    #[error("invalid log level {level:?}")]
    Level {
        level: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
}

/// The filter: `RUST_LOG` when set and non-empty, else `level` (e.g. `info`, `kache=debug,hyper=warn`).
pub fn filter(level: &str) -> Result<EnvFilter, LogError> {
    let directives = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(env) if !env.trim().is_empty() => env,
        _ => level.to_owned(),
    };
    EnvFilter::builder()
        .parse(&directives)
        .map_err(|source| LogError::Level { level: directives.clone(), source })
}

/// The subscriber kache logs through, writing to `writer` (stderr in production); `ansi` colours text lines.
pub fn subscriber<W>(
    format: LogFormat,
    level: &str,
    writer: W,
    ansi: bool,
) -> Result<Box<dyn Subscriber + Send + Sync>, LogError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter(level)?).with_writer(writer).with_ansi(ansi);
    Ok(match format {
        LogFormat::Text => Box::new(builder.finish()),
        LogFormat::Json => Box::new(builder.json().flatten_event(true).with_current_span(false).finish()),
    })
}

/// Installs the global subscriber. Idempotent: when one is already set (tests starting many kaches, or a
/// test harness's own), this leaves it in place and returns `Ok`.
pub fn init_tracing(format: LogFormat, level: &str) -> Result<(), LogError> {
    // Colours only for a person at a terminal; log collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let subscriber = subscriber(format, level, std::io::stderr, ansi)?;
    // Fails only when a global subscriber exists already, which is what idempotence means here.
    let _already_set = tracing::subscriber::set_global_default(subscriber);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_and_print() {
        assert_eq!("json".parse::<LogFormat>().ok(), Some(LogFormat::Json));
        assert_eq!("text".parse::<LogFormat>().ok(), Some(LogFormat::Text));
        assert!(matches!("xml".parse::<LogFormat>(), Err(LogError::Format(f)) if f == "xml"));
        assert_eq!(LogFormat::Json.to_string(), "json");
    }

    #[test]
    fn levels_are_validated() {
        // RUST_LOG is not set in the test environment unless a developer sets it; then it wins by design.
        if std::env::var(EnvFilter::DEFAULT_ENV).is_ok() {
            return;
        }
        assert!(filter("info").is_ok());
        assert!(filter("kache=debug,hyper=warn").is_ok());
        assert!(matches!(filter("kache=loud"), Err(LogError::Level { .. })));
    }

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("test lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn capture(format: LogFormat, level: &str, log: impl FnOnce()) -> String {
        let buffer = Buffer::default();
        let out = buffer.clone();
        let subscriber = subscriber(format, level, move || out.clone(), false).expect("valid level");
        tracing::subscriber::with_default(subscriber, log);
        String::from_utf8(buffer.0.lock().expect("test lock").clone()).expect("utf-8 logs")
    }

    #[test]
    fn json_lines_carry_fields_at_the_top_level() {
        if std::env::var(EnvFilter::DEFAULT_ENV).is_ok() {
            return;
        }
        let text = capture(LogFormat::Json, "info", || {
            tracing::info!(resource = "v1/pods", rv = 42u64, "reflector synced");
            tracing::debug!("hidden at info");
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).expect("one JSON object per line");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["message"], "reflector synced");
        assert_eq!(v["resource"], "v1/pods");
        assert_eq!(v["rv"], 42);
        assert!(v["timestamp"].is_string());
    }

    #[test]
    fn text_lines_are_human_readable_and_filtered() {
        if std::env::var(EnvFilter::DEFAULT_ENV).is_ok() {
            return;
        }
        let text = capture(LogFormat::Text, "warn", || {
            tracing::info!("not shown");
            tracing::warn!(resource = "v1/pods", "backing off");
        });
        assert!(!text.contains("not shown"), "{text}");
        assert!(
            text.contains("WARN") && text.contains("backing off") && text.contains("resource=\"v1/pods\""),
            "{text}"
        );
    }

    #[test]
    fn init_is_idempotent() {
        assert!(init_tracing(LogFormat::Json, "warn").is_ok());
        assert!(init_tracing(LogFormat::Text, "info").is_ok());
        tracing::info!("logged after a second init");
    }
}
