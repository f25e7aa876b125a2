//! Progress bars (indicatif) for long stages; hidden when stderr is not a terminal.

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};

/// Draws one bar per stage, with rate and ETA.
pub struct Bars {
    bar: Mutex<Option<ProgressBar>>,
    quiet: bool,
}

impl Bars {
    pub fn new(quiet: bool) -> Self {
        Self {
            bar: Mutex::new(None),
            quiet,
        }
    }
}

impl capstan_indexer::Progress for Bars {
    fn stage(&self, name: &str, total: u64) {
        if self.quiet {
            return;
        }
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{msg:>8} [{bar:30}] {pos}/{len} {per_sec} ETA {eta}")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_message(name.to_string());
        *self.bar.lock().expect("progress lock") = Some(bar);
    }

    fn advance(&self, n: u64) {
        if let Some(bar) = self.bar.lock().expect("progress lock").as_ref() {
            bar.inc(n);
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.bar.lock().expect("progress lock").take() {
            bar.finish_and_clear();
        }
    }
}
