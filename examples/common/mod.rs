//! What the example command lines share: an error as a sentence (printed with exit code 1),
//! and comma-separated lists. Everything else is library API (`lmsplit::experiment`).

use std::fmt::Display;
use std::process::ExitCode;

/// Prints `error: <sentence>` (with the chain of causes) and returns exit code 1 on error.
pub fn finish<E: Into<Box<dyn std::error::Error>>>(result: Result<(), E>) -> ExitCode {
    let Err(e) = result else {
        return ExitCode::SUCCESS;
    };
    let e: Box<dyn std::error::Error> = e.into();
    let msg = sentence(e.as_ref());
    eprintln!("error: {msg}");
    ExitCode::FAILURE
}

/// An error and its causes as one sentence (`a: b: c`), each message once, never a Debug
/// struct.
pub fn sentence(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        let text = cause.to_string();
        // `#[error(transparent)]` and "{source}" repeat the inner message: print it once.
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        src = cause.source();
    }
    msg
}

/// Parses `a,b,c` into a list (empty input: an empty list).
#[allow(dead_code)]
pub fn parse_list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>, String>
where
    T::Err: Display,
{
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().map_err(|e| format!("{x:?}: {e}")))
        .collect()
}
