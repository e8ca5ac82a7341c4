//! A progress bar for long runs (stderr; hidden when stderr is not a terminal).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Progress over a known number of measurement steps.
#[derive(Debug)]
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar of `steps` steps titled `what`, shown only if `enabled` and the expected total
    /// time exceeds two seconds.
    pub fn new(what: &str, steps: u64, expected: Duration, enabled: bool) -> Progress {
        if !enabled || expected < Duration::from_secs(2) || steps == 0 {
            return Progress(None);
        }
        let bar = ProgressBar::new(steps);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} ~{eta} {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_prefix(what.to_string());
        Progress(Some(bar))
    }

    /// One step done.
    pub fn tick(&self) {
        if let Some(b) = &self.0 {
            b.inc(1);
        }
    }

    /// Shows a short message after the bar.
    pub fn message(&self, msg: impl Into<String>) {
        if let Some(b) = &self.0 {
            b.set_message(msg.into());
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
