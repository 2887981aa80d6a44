//! Sharded streaming extraction: shards tile a split, merged shards equal one pass, a shard
//! resumes exactly from a checkpoint, stale files are recomputed and bad shards refused by name.

use std::path::{Path, PathBuf};

use lmd::encoder::{load, Encoder, LoadOptions};
use lmd::extract::ExtractOptions;
use lmd::moments::Moments;
use lmd::shard::{
    merge_shards, shard_moments, ExtractKey, ModelKey, Shard, ShardStatus, StreamSettings,
};
use lmd::LmdError;

mod fixture;

use fixture::{encoder as fixture, texts};

fn opts() -> ExtractOptions {
    let mut o = ExtractOptions::new(12);
    o.progress = false;
    o
}

/// What [`shard_moments`] did for the whole split at chunk 8.
fn status(
    encs: &[&dyn Encoder],
    texts: &[String],
    opts: &ExtractOptions,
    path: &Path,
) -> ShardStatus {
    shard_moments(encs, texts, opts, Shard::WHOLE, path, &settings(8))
        .unwrap()
        .1
}

fn settings(chunk: usize) -> StreamSettings {
    StreamSettings {
        chunk,
        progress: false,
        ..StreamSettings::default()
    }
}

fn assert_close(a: &Moments, b: &Moments, tol: f64) {
    assert_eq!(a.n(), b.n());
    let (ca, cb) = (a.covariance().unwrap(), b.covariance().unwrap());
    let scale = (0..ca.nrows())
        .map(|i| ca[(i, i)].abs())
        .fold(0.0, f64::max);
    for i in 0..ca.nrows() {
        for j in 0..ca.ncols() {
            assert!(
                (ca[(i, j)] - cb[(i, j)]).abs() <= tol * scale,
                "cov[{i},{j}] {} vs {}",
                ca[(i, j)],
                cb[(i, j)]
            );
        }
    }
    for (x, y) in a.mean().unwrap().iter().zip(&b.mean().unwrap()) {
        assert!((x - y).abs() <= tol * (1.0 + x.abs()), "mean {x} vs {y}");
    }
}

#[test]
fn shards_tile_the_rows_and_parse_from_i_slash_n() {
    for (n, count) in [(10, 3), (7, 7), (100, 1), (5, 4)] {
        let ranges: Vec<_> = Shard::all(count)
            .unwrap()
            .iter()
            .map(|s| s.range(n))
            .collect();
        assert_eq!(ranges[0].start, 0);
        assert_eq!(ranges[count - 1].end, n);
        assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
    }
    assert_eq!("2/5".parse::<Shard>().unwrap(), Shard::new(2, 5).unwrap());
    for bad in ["5/5", "1", "a/2", "0/0", "-1/3"] {
        assert!(bad.parse::<Shard>().is_err(), "{bad}");
    }
}

#[test]
fn three_merged_shards_equal_one_pass() {
    let (a, b) = (fixture("bert"), fixture("distilbert"));
    let encs: [&dyn Encoder; 2] = [&a, &b];
    let texts = texts(50);
    let dir = tempfile::tempdir().unwrap();
    let (whole, status) = shard_moments(
        &encs,
        &texts,
        &opts(),
        Shard::WHOLE,
        &dir.path().join("whole.safetensors"),
        &settings(8),
    )
    .unwrap();
    assert_eq!(status, ShardStatus::Computed { replaced: vec![] });
    let models: Vec<ModelKey> = encs.iter().map(|e| ModelKey::of(*e).unwrap()).collect();
    let mut files = Vec::new();
    for s in Shard::all(3).unwrap() {
        let path = dir.path().join(format!("s{}.safetensors", s.index));
        shard_moments(&encs, &texts, &opts(), s, &path, &settings(8)).unwrap();
        let key = ExtractKey::new(&models, &texts[s.range(texts.len())], &opts(), s, 8);
        files.push((path, key));
    }
    let merged = merge_shards(&files).unwrap();
    assert_eq!(merged.names(), whole.names());
    assert_close(&merged, &whole, 1e-12);
}

#[test]
fn an_interrupted_shard_resumes_to_the_uninterrupted_moments_bit_for_bit() {
    let (a, b) = (fixture("bert"), fixture("gpt2"));
    let encs: [&dyn Encoder; 2] = [&a, &b];
    let texts = texts(37);
    let dir = tempfile::tempdir().unwrap();
    let straight = dir.path().join("straight.safetensors");
    let (m0, _) = shard_moments(
        &encs,
        &texts,
        &opts(),
        Shard::WHOLE,
        &straight,
        &settings(5),
    )
    .unwrap();
    let cut = dir.path().join("cut.safetensors");
    // 12 rows per call are rounded down to the chunk grid (10), so the resumed updates are the
    // uninterrupted ones.
    let mut s = settings(5);
    s.max_rows = Some(12);
    let (_, st) = shard_moments(&encs, &texts, &opts(), Shard::WHOLE, &cut, &s).unwrap();
    assert_eq!(st, ShardStatus::Partial { rows: 10 });
    let (_, st) = shard_moments(&encs, &texts, &opts(), Shard::WHOLE, &cut, &s).unwrap();
    assert_eq!(st, ShardStatus::Partial { rows: 20 });
    let (m1, st) = shard_moments(&encs, &texts, &opts(), Shard::WHOLE, &cut, &settings(5)).unwrap();
    assert_eq!(st, ShardStatus::Resumed { from: 20 });
    let (c0, c1) = (m0.covariance().unwrap(), m1.covariance().unwrap());
    for i in 0..c0.nrows() {
        for j in 0..c0.ncols() {
            assert_eq!(c0[(i, j)].to_bits(), c1[(i, j)].to_bits(), "cov[{i},{j}]");
        }
    }
    let (_, st) = shard_moments(&encs, &texts, &opts(), Shard::WHOLE, &cut, &settings(5)).unwrap();
    assert_eq!(st, ShardStatus::Reused);
}

#[test]
fn a_stale_file_is_recomputed_naming_what_changed() {
    let (a, b) = (fixture("bert"), fixture("distilbert"));
    let encs: [&dyn Encoder; 2] = [&a, &b];
    let texts = texts(20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    let replaced = |fields: &[&'static str]| ShardStatus::Computed {
        replaced: fields.to_vec(),
    };
    assert_eq!(status(&encs, &texts, &opts(), &path), replaced(&[]));
    let mut other = opts();
    other.t = 10;
    assert_eq!(status(&encs, &texts, &other, &path), replaced(&["T"]));
    assert_eq!(
        status(&encs, &texts[1..], &other, &path),
        replaced(&["texts"])
    );
    // Another model under the same name: the fingerprint, not the name, decides.
    let renamed = dir.path().join("bert");
    std::fs::create_dir(&renamed).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/distilbert");
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, renamed.join(f.file_name().unwrap())).unwrap();
    }
    let imposter = load(&renamed, &LoadOptions::default()).unwrap();
    assert_eq!(imposter.name(), "bert");
    let encs2: [&dyn Encoder; 2] = [&imposter, &b];
    assert_eq!(
        status(&encs2, &texts[1..], &other, &path),
        replaced(&["model fingerprints"])
    );
    assert_eq!(
        status(&encs2, &texts[1..], &other, &path),
        ShardStatus::Reused
    );
}

#[test]
fn merging_refuses_missing_unfinished_and_foreign_shards_by_path() {
    let (a, b) = (fixture("bert"), fixture("distilbert"));
    let encs: [&dyn Encoder; 2] = [&a, &b];
    let texts = texts(30);
    let dir = tempfile::tempdir().unwrap();
    let models: Vec<ModelKey> = encs.iter().map(|e| ModelKey::of(*e).unwrap()).collect();
    let shards = Shard::all(2).unwrap();
    let files: Vec<(PathBuf, ExtractKey)> = shards
        .iter()
        .map(|&s| {
            let rows = &texts[s.range(texts.len())];
            let key = ExtractKey::new(&models, rows, &opts(), s, 4);
            (dir.path().join(format!("s{}.safetensors", s.index)), key)
        })
        .collect();
    let shard_err = |files: &[(PathBuf, ExtractKey)]| match merge_shards(files) {
        Err(LmdError::Shard { path, reason }) => (path, reason),
        other => panic!("expected a shard error, got {other:?}"),
    };
    shard_moments(&encs, &texts, &opts(), shards[0], &files[0].0, &settings(4)).unwrap();
    let (path, reason) = shard_err(&files);
    assert_eq!(path, files[1].0);
    assert!(reason.contains("not been extracted"), "{reason}");
    let mut s = settings(4);
    s.max_rows = Some(4);
    shard_moments(&encs, &texts, &opts(), shards[1], &files[1].0, &s).unwrap();
    let (path, reason) = shard_err(&files);
    assert_eq!(path, files[1].0);
    assert!(reason.contains("unfinished: 4 of 15"), "{reason}");
    // Shard 1 computed at another T is not part of this study.
    let mut other = opts();
    other.t = 9;
    shard_moments(&encs, &texts, &other, shards[1], &files[1].0, &settings(4)).unwrap();
    let (_, reason) = shard_err(&files);
    assert!(reason.contains("other T"), "{reason}");
    shard_moments(&encs, &texts, &opts(), shards[1], &files[1].0, &settings(4)).unwrap();
    assert_eq!(merge_shards(&files).unwrap().n(), 30);
}

#[test]
fn a_shard_cut_short_is_refused_naming_it_and_not_overwritten() {
    let (a, b) = (fixture("bert"), fixture("distilbert"));
    let encs: [&dyn Encoder; 2] = [&a, &b];
    let texts = texts(20);
    let dir = tempfile::tempdir().unwrap();
    let models: Vec<ModelKey> = encs.iter().map(|e| ModelKey::of(*e).unwrap()).collect();
    let shards = Shard::all(2).unwrap();
    let files: Vec<(PathBuf, ExtractKey)> = shards
        .iter()
        .map(|&s| {
            let rows = &texts[s.range(texts.len())];
            let key = ExtractKey::new(&models, rows, &opts(), s, 4);
            (dir.path().join(format!("s{}.safetensors", s.index)), key)
        })
        .collect();
    for (s, (path, _)) in shards.iter().zip(&files) {
        shard_moments(&encs, &texts, &opts(), *s, path, &settings(4)).unwrap();
    }
    assert_eq!(merge_shards(&files).unwrap().n(), 20);
    let bytes = std::fs::read(&files[1].0).unwrap();
    std::fs::write(&files[1].0, &bytes[..bytes.len() / 2]).unwrap();
    match merge_shards(&files) {
        Err(LmdError::Shard { path, reason }) => {
            assert_eq!(path, files[1].0);
            assert!(
                reason.contains("shard 1/2") && reason.contains("cannot be read"),
                "{reason}"
            );
        }
        other => panic!("expected a shard error, got {other:?}"),
    }
    // Extracting it again refuses too, and leaves the cut file for inspection.
    match shard_moments(&encs, &texts, &opts(), shards[1], &files[1].0, &settings(4)) {
        Err(LmdError::Shard { path, reason }) => {
            assert_eq!(path, files[1].0);
            assert!(reason.contains("shard 1/2"), "{reason}");
        }
        other => panic!("expected a shard error, got {other:?}"),
    }
    assert_eq!(std::fs::read(&files[1].0).unwrap().len(), bytes.len() / 2);
}

#[test]
fn a_second_writer_of_a_shard_is_refused_and_a_dead_writers_lock_taken_over() {
    let a = fixture("bert");
    let encs: [&dyn Encoder; 1] = [&a];
    let texts = texts(8);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("whole.safetensors");
    let lock = dir.path().join("whole.safetensors.lock");
    // A live writer (this process, through another open file) holds the lock: refused naming
    // it, nothing written.
    let held = files::FolderLock::acquire(&lock, "shard").unwrap();
    match shard_moments(&encs, &texts, &opts(), Shard::WHOLE, &path, &settings(4)) {
        Err(LmdError::Shard { path: p, reason }) => {
            assert_eq!(p, path);
            let want = format!("being written by process {} on host ", std::process::id());
            assert!(reason.contains(&want), "{reason}");
            assert!(reason.contains("whole.safetensors.lock"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    drop(held);
    assert!(!path.exists());
    // A writer that holds the lock but has not yet written its name is a writer all the same.
    let nameless = std::fs::File::open(&lock).unwrap();
    nameless.lock().unwrap();
    match shard_moments(&encs, &texts, &opts(), Shard::WHOLE, &path, &settings(4)) {
        Err(LmdError::Shard { reason, .. }) => {
            assert!(
                reason.contains("being written by another process"),
                "{reason}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    drop(nameless);
    assert!(!path.exists());
    // A lock file left by a process that has exited (the kernel released its lock) is taken.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    std::fs::write(
        &lock,
        format!("process {dead} on host here since 2020-01-01T00:00:00Z\n"),
    )
    .unwrap();
    let (m, s) = shard_moments(&encs, &texts, &opts(), Shard::WHOLE, &path, &settings(4)).unwrap();
    assert_eq!((m.n(), s), (8, ShardStatus::Computed { replaced: vec![] }));
    // The writer is done: its lock file (which may stay) names nobody and is free.
    assert_eq!(std::fs::read_to_string(&lock).unwrap_or_default(), "");
    drop(files::FolderLock::acquire(&lock, "shard").unwrap());
}

/// Moments of width 2048 after `k` deterministic rows (a file of 33 MB: its write takes long
/// enough to be interrupted).
fn kill_state(k: usize) -> Moments {
    let d = 2048;
    let mut m = Moments::new(vec!["a".into()], vec![d]).unwrap();
    let rows: Vec<f32> = (0..k * d)
        .map(|i| ((i * 7919) % 1013) as f32 / 101.0)
        .collect();
    m.update_stacked(&rows).unwrap();
    m
}

#[test]
fn a_kill_during_a_shard_write_leaves_the_previous_state() {
    use std::collections::HashMap;
    const ENV: &str = "LMD_KILL_WRITER_TARGET";
    if let Ok(target) = std::env::var(ENV) {
        // The child: checkpoint ever larger states until killed (or 60 s).
        let t0 = std::time::Instant::now();
        let mut k = 2;
        while t0.elapsed().as_secs() < 60 {
            let meta = HashMap::from([("rows".to_string(), k.to_string())]);
            kill_state(k).save_with(&target, &meta).unwrap();
            k += 1;
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("shard.safetensors");
    let meta = HashMap::from([("rows".to_string(), "1".to_string())]);
    kill_state(1).save_with(&target, &meta).unwrap();
    let full = std::fs::metadata(&target).unwrap().len();
    let exe = std::env::current_exe().unwrap();
    let mut partial_kills = 0;
    for attempt in 0..10 {
        let mut child = std::process::Command::new(&exe)
            .args([
                "a_kill_during_a_shard_write_leaves_the_previous_state",
                "--exact",
                "--test-threads=1",
            ])
            .env(ENV, &target)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait until a temporary file is half written, then kill the writer at once.
        let t0 = std::time::Instant::now();
        let mut seen = false;
        while t0.elapsed().as_secs() < 10 && !seen {
            for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                if name.ends_with(".tmp") && len > 0 && len < full {
                    seen = true;
                }
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // The target is a whole state: one of the states written, read back exactly.
        let (m, meta) = Moments::load_with(&target)
            .unwrap_or_else(|e| panic!("attempt {attempt}: the shard file is broken: {e}"));
        let k: usize = meta["rows"].parse().unwrap();
        assert_eq!(m.n(), k as u64);
        let want = kill_state(k);
        assert_eq!(m.covariance().unwrap(), want.covariance().unwrap());
        // Whatever the kill left half written is a temporary file, never the shard.
        for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                if e.metadata().unwrap().len() < full {
                    partial_kills += 1;
                }
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        if partial_kills >= 3 {
            break;
        }
    }
    assert!(
        partial_kills > 0,
        "no kill landed during a write: the test did not test anything"
    );
}
