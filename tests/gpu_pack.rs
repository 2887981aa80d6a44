//! Process-level: `scripts/gpu_pack.sh` packs the set a lent GPU session carries from a
//! stand-in target dir (shell scripts in place of the CUDA binaries, `PACK_SKIP_BUILD`), in a
//! copy of the script with its own `../shared/`. A wrong or stale binary in the pack costs the
//! session's device time.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Pack {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    target: PathBuf,
    cache: PathBuf,
}

/// A checkout holding only the script, beside a `shared/data` with the files the pack takes,
/// and a release target dir with every binary (two builds of `train_step`, the older first).
fn pack_dirs() -> Pack {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    fs::create_dir_all(repo.join("scripts")).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gpu_pack.sh");
    fs::copy(&script, repo.join("scripts/gpu_pack.sh")).unwrap();
    let shared = tmp.path().join("shared/data");
    for f in [
        "wikitext-2/train.txt",
        "wikitext-103-valid-test/wiki.valid.tokens",
        "wikitext-103-valid-test/wiki.test.tokens",
        "bert-base-uncased/vocab.txt",
        "ud-english-ewt/en_ewt-ud-train.conllu",
    ] {
        let p = shared.join(f);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, f).unwrap();
    }
    let target = tmp.path().join("target");
    let rel = target.join("release");
    fs::create_dir_all(rel.join("examples")).unwrap();
    fs::create_dir_all(rel.join("deps")).unwrap();
    for e in ["gpu_check", "reproduce", "two_tower"] {
        fs::write(rel.join("examples").join(e), format!("example {e}")).unwrap();
    }
    let tracer = target.join("cupti_trace");
    fs::create_dir_all(&tracer).unwrap();
    fs::write(tracer.join("libcupti_trace.so"), "the tracer").unwrap();
    fs::write(tracer.join("libcupti.so.13"), "CUPTI").unwrap();
    fs::write(rel.join("deps/train_step-0123abcd"), "old train_step").unwrap();
    fs::write(rel.join("deps/extract-4567ef01"), "extract").unwrap();
    fs::write(rel.join("deps/moments-89abcdef"), "moments").unwrap();
    // The newer build of train_step, and its dep-info file (newer still), which is not a binary.
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(rel.join("deps/train_step-fedcba98"), "new train_step").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(rel.join("deps/train_step-fedcba98.d"), "dep info").unwrap();
    let cache = tmp.path().join("cache");
    Pack {
        _tmp: tmp,
        repo,
        target,
        cache,
    }
}

fn run(p: &Pack) -> Output {
    Command::new("bash")
        .arg(p.repo.join("scripts/gpu_pack.sh"))
        .env("PACK_SKIP_BUILD", "1")
        .env("CARGO_TARGET_DIR", &p.target)
        .env("LMSPLIT_GPU_CACHE", &p.cache)
        // The stand-ins are text: nothing to strip.
        .env("STRIP", "true")
        .output()
        .unwrap()
}

fn unxz(path: &Path) -> String {
    let out = Command::new("xz").arg("-dc").arg(path).output().unwrap();
    assert!(out.status.success(), "xz -dc {}", path.display());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_pack_holds_each_binary_at_its_newest_build_and_the_data() {
    let p = pack_dirs();
    let out = run(&p);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = p.repo.join(".gpu/bin");
    let mut names: Vec<String> = fs::read_dir(&bin)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "extract.xz",
            "gpu_check.xz",
            "libcupti.so.13.xz",
            "libcupti_trace.so.xz",
            "moments.xz",
            "reproduce.xz",
            "train_step.xz",
            "two_tower.xz"
        ]
    );
    assert_eq!(unxz(&bin.join("train_step.xz")), "new train_step");
    assert_eq!(unxz(&bin.join("reproduce.xz")), "example reproduce");
    assert_eq!(unxz(&bin.join("libcupti_trace.so.xz")), "the tracer");
    assert_eq!(unxz(&bin.join("libcupti.so.13.xz")), "CUPTI");
    let listing = Command::new("tar")
        .arg("-tJf")
        .arg(p.repo.join(".gpu/data.tar.xz"))
        .output()
        .unwrap();
    let listing = String::from_utf8(listing.stdout).unwrap();
    for f in [
        "data/wikitext-2/train.txt",
        "data/wikitext-103-valid-test/wiki.test.tokens",
        "data/bert-base-uncased/vocab.txt",
        "data/ud-english-ewt/en_ewt-ud-train.conllu",
    ] {
        assert!(listing.lines().any(|l| l == f), "{f} not in {listing}");
    }
    // The same set in the cache; packed without a build, it cannot say what it was built from.
    assert_eq!(unxz(&p.cache.join("bin/train_step.xz")), "new train_step");
    assert!(p.cache.join("data.tar.xz").is_file());
    let commit = fs::read_to_string(p.cache.join("COMMIT")).unwrap();
    assert!(
        commit.starts_with("unknown: packed from an earlier build"),
        "{commit}"
    );
}

/// A stand-in `cargo`: a build prints nothing; a build with `--message-format=json` names
/// each target's binary as cargo does. `moments` is named at its older build, which a newer
/// binary of the same name (a test of lmd's tests/moments.rs) must not displace.
const FAKE_CARGO: &str = r#"#!/usr/bin/env bash
case "$*" in *--message-format=json*) ;; *) exit 0 ;; esac
T=$CARGO_TARGET_DIR/release
art() { echo "{\"reason\":\"compiler-artifact\",\"target\":{\"name\":\"$1\",\"kind\":[\"$2\"]},\"executable\":\"$3\"}"; }
echo '{"reason":"build-script-executed"}'
for e in gpu_check reproduce two_tower lmd_table; do art $e example $T/examples/$e; done
art train_step bench $T/deps/train_step-fedcba98
art extract bench $T/deps/extract-4567ef01
art moments bench $T/deps/moments-89abcdef
echo '{"reason":"build-finished","success":true}'
"#;

/// A stand-in C++ compiler: writes the command line it was given to its `-o` file; fails when
/// `$CXX_FAILS` is set.
const FAKE_CXX: &str = r#"#!/usr/bin/env bash
[ -n "${CXX_FAILS:-}" ] && { echo "cupti.h: no such file" >&2; exit 1; }
out=; prev=
for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done
echo "$*" > "$out"
"#;

/// A build's stand-ins beside the checkout: `cargo` and `c++` on a PATH of their own, and a
/// `cuda-env.sh` that sets the target dir and a CUDA root holding CUPTI. Returns the PATH.
fn fake_build(p: &Pack) -> String {
    let root = p.repo.parent().unwrap();
    let bin = root.join("fakebin");
    fs::create_dir_all(&bin).unwrap();
    fs::write(bin.join("cargo"), FAKE_CARGO).unwrap();
    fs::write(bin.join("fake-c++"), FAKE_CXX).unwrap();
    let cu = root.join("cu13");
    fs::create_dir_all(cu.join("include")).unwrap();
    fs::create_dir_all(cu.join("lib")).unwrap();
    fs::write(cu.join("include/cupti.h"), "").unwrap();
    fs::write(cu.join("lib/libcupti.so.13"), "CUPTI of the wheels").unwrap();
    let tools = root.join("shared/tools");
    fs::create_dir_all(&tools).unwrap();
    fs::write(
        tools.join("cuda-env.sh"),
        format!(
            "export CARGO_TARGET_DIR={} CUDA_ROOT={}\n",
            p.target.display(),
            cu.display()
        ),
    )
    .unwrap();
    for f in ["cargo", "fake-c++"] {
        Command::new("chmod")
            .args(["+x"])
            .arg(bin.join(f))
            .status()
            .unwrap();
    }
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

fn build(p: &Pack, env: &[(&str, &str)]) -> Output {
    let path = fake_build(p);
    Command::new("bash")
        .arg(p.repo.join("scripts/gpu_pack.sh"))
        .env("PATH", path)
        .env("CXX", "fake-c++")
        .env_remove("CARGO_TARGET_DIR")
        .env("LMSPLIT_GPU_CACHE", &p.cache)
        .env("STRIP", "true")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn a_build_builds_the_tracer_against_the_wheels_cupti_and_packs_that_cupti_beside_it() {
    let p = pack_dirs();
    let out = build(&p, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let packed = p.repo.join(".gpu/bin");
    let cmd = unxz(&packed.join("libcupti_trace.so.xz"));
    for part in [
        "tools/cupti_trace/cupti_trace.cpp tools/cupti_trace/profile.cpp",
        "-shared -fPIC",
        "-static-libstdc++",
        "-l:libcupti.so.13",
        "-rpath,$ORIGIN",
    ] {
        assert!(cmd.contains(part), "{part} not in {cmd}");
    }
    assert!(cmd.contains("cu13/include"), "{cmd}");
    assert_eq!(
        unxz(&packed.join("libcupti.so.13.xz")),
        "CUPTI of the wheels"
    );
}

#[test]
fn a_tracer_that_does_not_build_stops_the_pack() {
    let p = pack_dirs();
    let out = build(&p, &[("CXX_FAILS", "1")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the CUPTI tracer did not build"), "{err}");
    assert!(!p.repo.join(".gpu/bin").exists(), "a partial pack was made");
}

#[test]
fn a_build_packs_the_binaries_cargo_names_not_the_newest_of_a_name() {
    let p = pack_dirs();
    let rel = p.target.join("release");
    fs::write(rel.join("examples/lmd_table"), "example lmd_table").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(rel.join("deps/moments-00000000"), "lmd's moments test").unwrap();
    let out = build(&p, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let packed = p.repo.join(".gpu/bin");
    assert_eq!(unxz(&packed.join("moments.xz")), "moments");
    assert_eq!(unxz(&packed.join("train_step.xz")), "new train_step");
    assert!(
        !packed.join("lmd_table.xz").exists(),
        "lmd_table is built, not packed"
    );
    // Built here: the cache names what it was built from (no git here: "none").
    assert_eq!(
        fs::read_to_string(p.cache.join("COMMIT")).unwrap().trim(),
        "none"
    );
}

#[test]
fn a_missing_binary_stops_the_pack_naming_it() {
    let p = pack_dirs();
    fs::remove_file(p.target.join("release/examples/gpu_check")).unwrap();
    let out = run(&p);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no binary of gpu_check"), "{err}");
    assert!(!p.repo.join(".gpu/bin").exists(), "a partial pack was made");
}
