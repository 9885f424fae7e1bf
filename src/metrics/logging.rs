//! Structured logs (`--log-format text|json`, `--log-level`).
//!
//! Levels: `info` (the default) logs one line per upstream state change (reflector synced, watch restarted,
//! relist, backoff, caching started/stopped) and never one line per request; `debug` adds per-request and
//! per-connection detail. `RUST_LOG`, when set, overrides `--log-level` with full `EnvFilter` directives.

use std::fmt;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

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

/// Installs the global subscriber. Idempotent: when one is already set (tests starting many kaches, or a
/// test harness's own), this leaves it in place and returns `Ok`.
pub fn init_tracing(format: LogFormat, level: &str) -> Result<(), LogError> {
    let filter = filter(level)?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // `try_init` fails only when a global subscriber exists already, which is what idempotence means here.
    let _already_set = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
    };
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

    #[test]
    fn init_is_idempotent() {
        assert!(init_tracing(LogFormat::Json, "warn").is_ok());
        assert!(init_tracing(LogFormat::Text, "info").is_ok());
        tracing::info!("logged after a second init");
    }
}
