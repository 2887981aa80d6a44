//! How the experiments report what they do: [`Progress`] (bars on or off, messages to the
//! caller's sink; the library never prints) is `report::Progress`, shared with the LMD study
//! and re-exported here so that `experiment::Progress` keeps its path.

pub use report::Progress;
