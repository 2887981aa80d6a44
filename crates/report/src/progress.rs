//! How the libraries report what they do: the caller chooses. A [`Progress`] carries whether
//! long loops draw progress bars (on stderr, `indicatif`, drawn by the loops themselves) and
//! where one-line messages and tables go (a callback); the libraries themselves never print.
//! The two-tower experiments (`experiment`) and the LMD study (`lmd::study`) take one.

use std::sync::Arc;

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
    }
}
