//! How the libraries report what they do: the caller chooses. A [`Progress`] carries whether
//! long loops draw progress bars (on stderr, `indicatif`, through [`Progress::bar`]) and where
//! one-line messages and tables go (a callback); the libraries themselves never print. Training
//! (`towers`, `heads`), the two-tower experiments (`experiment`) and the LMD study
//! (`lmd::study`) take one.

use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};

/// A message sink.
type Sink = Arc<dyn Fn(&str) + Send + Sync>;

/// Progress reporting chosen by the caller: bars on or off, messages to a callback or nowhere.
#[derive(Clone, Default)]
pub struct Progress {
    bars: bool,
    sink: Option<Sink>,
}

impl Progress {
    /// No bars, no messages (the default).
    pub fn silent() -> Self {
        Self::default()
    }

    /// Progress bars, and every message handed to `sink`.
    pub fn to(sink: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Self {
            bars: true,
            sink: Some(Arc::new(sink)),
        }
    }

    /// Progress bars, and every message printed on stdout: what the command lines use.
    pub fn stdout() -> Self {
        Self::to(|m| println!("{m}"))
    }

    /// The same sink with bars on or off.
    pub fn with_bars(mut self, bars: bool) -> Self {
        self.bars = bars;
        self
    }

    /// Whether long loops draw progress bars.
    pub fn bars(&self) -> bool {
        self.bars
    }

    /// Hands a message to the sink (built only when there is one).
    pub fn say(&self, msg: impl FnOnce() -> String) {
        if let Some(s) = &self.sink {
            s(&msg());
        }
    }
}

impl Progress {
    /// A bar of `len` steps for a long loop, labelled `label`: drawn on stderr when the
    /// caller asked for bars, hidden (every call a no-op) otherwise. `len` 0: not known yet
    /// ([`Bar::set_length`]).
    pub fn bar(&self, len: u64, label: &str) -> Bar {
        if !self.bars {
            return Bar(ProgressBar::hidden());
        }
        let pb = ProgressBar::new(len);
        pb.set_style(
            ProgressStyle::with_template("{prefix} {bar:30} {pos}/{len} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        pb.set_prefix(label.to_string());
        Bar(pb)
    }
}

/// A progress bar handed out by [`Progress::bar`] (hidden unless the caller asked for bars).
#[derive(Debug, Clone)]
pub struct Bar(ProgressBar);

impl Bar {
    /// Moves the bar to `pos`.
    pub fn set_position(&self, pos: u64) {
        self.0.set_position(pos);
    }

    /// Advances the bar by `n`.
    pub fn inc(&self, n: u64) {
        self.0.inc(n);
    }

    /// The number of steps, once known.
    pub fn set_length(&self, len: u64) {
        self.0.set_length(len);
    }

    /// The number of steps (`Some(0)`: not known yet).
    pub fn length(&self) -> Option<u64> {
        self.0.length()
    }

    /// The text after the bar (loss, rate, ...).
    pub fn set_message(&self, msg: impl Into<String>) {
        self.0.set_message(msg.into());
    }

    /// Clears the bar from the terminal.
    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("bars", &self.bars)
            .field("messages", &self.sink.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn messages_reach_the_callers_sink_and_nowhere_when_silent() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let p = Progress::to(move |m| s2.lock().unwrap().push(m.to_string()));
        p.say(|| "one".into());
        assert!(p.bars() && !p.clone().with_bars(false).bars());
        let quiet = Progress::silent();
        quiet.say(|| panic!("a silent Progress must not build its messages"));
        assert_eq!(*seen.lock().unwrap(), ["one"]);
        // A silent Progress hands out hidden bars: they count, but draw nothing.
        let bar = quiet.bar(0, "steps");
        bar.set_length(10);
        bar.inc(3);
        assert_eq!(bar.length(), Some(10));
        bar.finish();
    }
}
