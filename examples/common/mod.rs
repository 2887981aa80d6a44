//! What the example command lines share: an error as a sentence (printed with exit code 1),
//! a written table printed, comma-separated lists, the `--device` flag, and stopping a run on
//! SIGTERM/SIGINT with exit code 75. Everything else is library API (`lmsplit::experiment`).

use std::fmt::Display;
use std::process::ExitCode;

use lmsplit::experiment::ExperimentError;

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

/// Prints a table the library wrote (its Markdown file) to stdout.
#[allow(dead_code)]
pub fn print_table(md: &std::path::Path) -> Result<(), ExperimentError> {
    let text = std::fs::read_to_string(md).map_err(|source| ExperimentError::Io {
        path: md.to_path_buf(),
        source,
    })?;
    println!("{text}");
    Ok(())
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

/// The device of a `--device` flag: `cpu`, `cuda` (GPU 0) or `cuda:<N>`; none: the first CUDA
/// GPU when this build has CUDA and one is present, else the CPU.
#[allow(dead_code)]
pub fn device(flag: Option<&str>) -> Result<candle_core::Device, ExperimentError> {
    use lmsplit::towers::CUDA_KERNELS_ENV;
    // A mistyped kernel switch fails here, before any work, not as a silent fallback.
    let value = std::env::var(CUDA_KERNELS_ENV).ok();
    let kernels =
        lmsplit::towers::CudaKernels::from_env_value(value.as_deref()).map_err(|why| {
            ExperimentError::bad_setting(
                CUDA_KERNELS_ENV,
                value.unwrap_or_default(),
                why.to_string(),
            )
        })?;
    lmsplit::towers::set_cuda_kernels(kernels);
    device_of(flag).map_err(|why| ExperimentError::bad_setting("--device", flag.unwrap_or(""), why))
}

/// How the examples open a CUDA device: the values of `LMSPLIT_CUDA_POOL` and
/// `LMSPLIT_CUDA_EVENTS` (`lmsplit::kernels::device::CudaOptions`).
#[allow(dead_code)]
pub fn cuda_options() -> lmsplit::kernels::device::CudaOptions {
    use lmsplit::kernels::device::{CudaOptions, EVENTS_ENV, POOL_ENV};
    let var = |k: &str| std::env::var(k).ok();
    CudaOptions::from_env_values(var(POOL_ENV).as_deref(), var(EVENTS_ENV).as_deref())
}

/// [`device`], its error a bare sentence.
fn device_of(flag: Option<&str>) -> Result<candle_core::Device, String> {
    use candle_core::Device;
    let cuda = |id: usize| {
        lmsplit::kernels::device::cuda_with(id, cuda_options()).map_err(|e| {
            format!("no CUDA device {id} ({e}); build with --features cuda on a GPU machine")
        })
    };
    match flag {
        None => lmsplit::kernels::device::cuda_if_available_with(0, cuda_options())
            .map_err(|e| e.to_string()),
        Some("cpu") => Ok(Device::Cpu),
        Some("cuda") => cuda(0),
        Some(s) => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(id)) => cuda(id),
            _ => Err(format!("unknown device {s:?} (cpu, cuda, cuda:<N>)")),
        },
    }
}

/// Exit code of a run stopped on request (SIGTERM or SIGINT) after writing its checkpoint:
/// EX_TEMPFAIL of sysexits.h. The same command started again resumes bit-exactly; a second
/// signal ends the process at once.
pub const EXIT_STOPPED: u8 = 75;

/// The stop token the signal handler requests (a handler cannot capture one).
static STOP: std::sync::OnceLock<lmsplit::towers::StopToken> = std::sync::OnceLock::new();

/// SIGTERM (what Slurm and Kubernetes send before a kill) and SIGINT request the returned stop
/// token (one atomic store), which the caller hands to the library's training and scoring
/// (`RunOptions::stop`): they stop at their next step boundary with a checkpoint. The handler
/// then restores the default action, so a second signal kills.
#[allow(dead_code)]
pub fn stop_on_signals() -> lmsplit::towers::StopToken {
    let token = STOP.get_or_init(lmsplit::towers::StopToken::new).clone();
    #[cfg(unix)]
    {
        extern "C" fn on_signal(sig: libc::c_int) {
            if let Some(t) = STOP.get() {
                t.request();
            }
            // SAFETY: signal() is async-signal-safe; SIG_DFL is a valid disposition.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        for sig in [libc::SIGTERM, libc::SIGINT] {
            // SAFETY: the handler only stores an atomic and calls signal(), both
            // async-signal-safe.
            unsafe {
                libc::signal(
                    sig,
                    on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
                );
            }
        }
    }
    token
}

/// A closed standard output (`reproduce --status | head`) ends the process quietly, as it
/// does any Unix filter, instead of Rust's default: `println!` panicking on EPIPE.
pub fn quiet_on_broken_pipe() {
    #[cfg(unix)]
    // SAFETY: restores the default disposition of SIGPIPE before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Exit code 75 with the stop's sentence for a requested stop, else `common::finish`.
#[allow(dead_code)]
pub fn exit_stopped_or_finish(result: Result<(), ExperimentError>) -> ExitCode {
    match result {
        Err(e) if e.is_stopped() => {
            eprintln!("{}", sentence(&e));
            ExitCode::from(EXIT_STOPPED)
        }
        r => finish(r),
    }
}
