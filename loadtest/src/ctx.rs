//! What every scenario runner shares: the binaries, where logs go, the progress bar.

use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::procs::Bins;

/// How long kache may take for its initial sync (300k pods on a busy machine).
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(900);

pub struct Ctx {
    pub bins: Bins,
    /// Logs of the subprocesses.
    pub log_dir: PathBuf,
    pub progress: ProgressBar,
}

impl Ctx {
    pub fn new(bins: Bins, log_dir: PathBuf) -> Self {
        let progress = ProgressBar::new(0);
        progress.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
                .expect("static template is valid"),
        );
        progress.enable_steady_tick(Duration::from_millis(250));
        Self { bins, log_dir, progress }
    }

    /// A log file path for `what` of the current run.
    pub fn log(&self, what: &str) -> PathBuf {
        self.log_dir.join(format!("{what}.log"))
    }

    /// Prints a line above the progress bar.
    pub fn say(&self, msg: impl AsRef<str>) {
        self.progress.println(msg.as_ref());
    }
}
