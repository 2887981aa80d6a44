//! What the caller hands to long work besides its settings: a [`StopToken`] to end it early
//! with a checkpoint, and a [`Progress`] for its bars and messages. Neither changes a number.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use report::Progress;

/// A stop request shared between the caller and the work it started: training, the heads'
/// scoring, waiting for a folder's lock. Cloning shares the request. [`StopToken::request`] is
/// one atomic store, so a signal handler (SIGTERM, what Slurm and Kubernetes send before a
/// kill) may call it; the work stops at its next step boundary, writes its checkpoint and
/// returns [`crate::TowersError::Stopped`].
#[derive(Debug, Clone, Default)]
pub struct StopToken(Arc<AtomicBool>);

impl StopToken {
    /// A token not requested yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the work holding this token (or a clone) to stop.
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether a stop was requested (and not cleared since).
    pub fn requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Withdraws a request (e.g. before the next job of a long-lived process).
    pub fn clear(&self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// How the caller controls and watches a long computation: its stop token and its progress
/// (silent and never stopped by default).
#[derive(Debug, Clone, Default)]
pub struct Control {
    /// Ends the work early, with a checkpoint.
    pub stop: StopToken,
    /// Bars and messages.
    pub progress: Progress,
}

impl Control {
    /// `stop` and `progress`.
    pub fn new(stop: StopToken, progress: Progress) -> Self {
        Self { stop, progress }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_shares_the_request_and_clear_withdraws_it() {
        let t = StopToken::new();
        let c = Control::new(t.clone(), Progress::silent());
        assert!(!c.stop.requested());
        t.request();
        assert!(c.stop.requested());
        c.stop.clear();
        assert!(!t.requested());
    }
}
