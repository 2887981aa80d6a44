//! Pretrained encoders on the target against the CPU: pooled embeddings in f32 and bf16, the
//! target's f32 against transformers' reference outputs, and joint moments.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use lmsplit::lmd::encoder::{load, pool, Encoder, LoadOptions, LoadedEncoder, Pooling};
use lmsplit::lmd::extract::{embed_into_moments, embed_texts, ExtractOptions};
use lmsplit::lmd::moments::Moments;

use crate::compare::{host, min_row_cosine, rel_max_diff};
use crate::report::{guarded, Bound, BoxError, Check};

/// f32 embeddings, target against CPU: max |Δe| / max |e_cpu| ≤ this. The parity tests hold
/// our encoders to 1e-4 of transformers' hidden states; a GPU computing the same f32 graph with
/// reordered reductions (and the composed ops where the CPU runs its fused block) stays well
/// inside that (≈ 1e-6 observed between the two CPU paths).
pub const EMB_F32_REL: f64 = 1e-4;
/// f32 embeddings: the smallest per-text cosine similarity, target against CPU.
pub const EMB_F32_COS: f64 = 0.99999;
/// bf16 embeddings against the CPU's f32: max |Δe| / max |e_cpu| ≤ this. bf16 rounds every
/// activation to 8 significant bits (2⁻⁹ ≈ 0.2% relative); through 2–6 layers (random fixture
/// weights with initializer range 0.2, far from uniform attention) the pooled vectors drifted
/// by 0.56–1.04% of their largest entry on candle's CPU bf16 path: 10x margin for other kernels.
/// A wrong mask moves them by far more (the Longformer fixture's band mask alone changes its
/// hidden states by 1.8).
pub const EMB_BF16_REL: f64 = 0.1;
/// bf16 embeddings: the smallest per-text cosine similarity against the CPU's f32. A mask
/// overflowing to −∞ gives NaN, a wrong mask (padding attended) gives cosines far below this.
pub const EMB_BF16_COS: f64 = 0.99;
/// The target's f32 pooled embedding against transformers' (pooled from the reference hidden
/// states of the same ids): the parity tests' 1e-4.
pub const REFERENCE_REL: f64 = 1e-4;
/// Joint moments from the target's f32 embeddings against the CPU's (mean, covariance):
/// max |Δ| / max |reference| ≤ this. The embeddings agree to [`EMB_F32_REL`] of their scale;
/// the moments inherit that, amplified by |e| / σ where the pooled vectors share a common
/// offset (up to ≈ 10 on these fixtures).
pub const MOMENTS_EMBED_REL: f64 = 1e-3;
/// The same f32 embeddings accumulated into moments on the target (`Moments::update_tensor`:
/// the shifted Gram in f64 on the device) against the host (`Moments::update_stacked`, faer in
/// f64): only the f64 summation order differs (≈ 1e-15), so 1e-10 relative.
pub const MOMENTS_F64_REL: f64 = 1e-10;

/// Tokens per text (special tokens included) for every encoder: the fixtures' position tables
/// hold 64 (DeBERTa's relative positions any), and the second text is cut at 16.
pub const SEQ_LEN: usize = 16;

/// The texts every encoder embeds: the parity fixtures' four (their tokenizers were trained on
/// them) and four more of mostly the same words; lengths differ, so batches are padded.
pub const TEXTS: [&str; 8] = [
    "the cat sat on the mat .",
    "a quick brown fox jumps over the lazy dog and keeps running far away from here",
    "hello world",
    "language models divide language among themselves .",
    "the dog sat on the mat and the cat ran away .",
    "hello language models",
    "a lazy cat keeps running",
    "models divide the world .",
];

/// One encoder under test: its name, folder and (if any) transformers' reference outputs.
#[derive(Debug, Clone)]
pub struct EncoderSpec {
    /// The check names' subject (folder name).
    pub name: String,
    /// The model folder.
    pub dir: PathBuf,
    /// `expected.safetensors` with `input_ids`, `attention_mask` and `hidden` or `mean`.
    pub reference: Option<PathBuf>,
}

/// Every model folder under `fixtures` (those with a `config.json`: the parity fixtures; the
/// reference-only folders are skipped) in name order, then MiniLM when given (its reference
/// outputs are `fixtures/minilm-reference`).
pub fn encoder_specs(fixtures: &Path, minilm: Option<&Path>) -> Result<Vec<EncoderSpec>, BoxError> {
    let entries = std::fs::read_dir(fixtures).map_err(|e| {
        format!(
            "cannot read the fixtures folder {}: {e}",
            fixtures.display()
        )
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("config.json").is_file())
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        return Err(format!("{} holds no model folder (config.json)", fixtures.display()).into());
    }
    let existing = |p: PathBuf| p.is_file().then_some(p);
    let mut specs: Vec<EncoderSpec> = dirs
        .into_iter()
        .map(|dir| EncoderSpec {
            name: file_name(&dir),
            reference: existing(dir.join("expected.safetensors")),
            dir,
        })
        .collect();
    if let Some(m) = minilm {
        specs.push(EncoderSpec {
            name: file_name(m),
            dir: m.to_path_buf(),
            reference: existing(fixtures.join("minilm-reference/expected.safetensors")),
        });
    }
    Ok(specs)
}

/// A path's last component as text.
fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// One encoder loaded in f32 on the CPU (the reference) and on the target.
pub struct Pair {
    /// CPU, f32.
    pub cpu: LoadedEncoder,
    /// Target, f32.
    pub target: LoadedEncoder,
    /// The CPU's f32 embeddings of [`TEXTS`], row-major [n, width].
    pub cpu_embeddings: Vec<f32>,
}

/// Extraction at [`SEQ_LEN`], masked mean, no progress bar.
fn extract_options() -> ExtractOptions {
    ExtractOptions {
        progress: false,
        ..ExtractOptions::new(SEQ_LEN)
    }
}

/// [`TEXTS`] as owned strings.
fn texts() -> Vec<String> {
    TEXTS.iter().map(|s| s.to_string()).collect()
}

/// Loads `dir` on `device` at `dtype`.
fn load_on(dir: &Path, device: &Device, dtype: DType) -> Result<LoadedEncoder, BoxError> {
    let opts = LoadOptions {
        device: device.clone(),
        dtype,
    };
    Ok(load(dir, &opts)?)
}

/// The checks of every encoder, then the moments over those that loaded on both devices.
pub fn encoder_section(specs: &[EncoderSpec], target: &Device) -> Vec<Check> {
    let mut checks = Vec::new();
    let mut pairs = Vec::new();
    for spec in specs {
        let label = format!("enc/{}", spec.name);
        match load_pair(spec, target) {
            Ok(pair) => {
                checks.extend(pair_checks(&label, spec, &pair, target));
                pairs.push(pair);
            }
            Err(e) => checks.push(Check::failed(format!("{label}/load"), e.as_ref())),
        }
    }
    if !pairs.is_empty() {
        checks.extend(guarded("moments/embed", || moments_from_embeddings(&pairs)));
        checks.extend(guarded("moments/f64", || moments_on_device(&pairs, target)));
    }
    checks
}

/// Loads one encoder in f32 on the CPU and on the target, and embeds [`TEXTS`] on the CPU.
fn load_pair(spec: &EncoderSpec, target: &Device) -> Result<Pair, BoxError> {
    let cpu = load_on(&spec.dir, &Device::Cpu, DType::F32)?;
    let target = load_on(&spec.dir, target, DType::F32)?;
    let cpu_embeddings = embed_texts(&cpu, &texts(), &extract_options())?.data;
    Ok(Pair {
        cpu,
        target,
        cpu_embeddings,
    })
}

/// One encoder's checks: f32 and bf16 against the CPU, and transformers' reference if any.
fn pair_checks(label: &str, spec: &EncoderSpec, pair: &Pair, target: &Device) -> Vec<Check> {
    let mut checks = guarded(&format!("{label}/f32"), || f32_checks(label, pair));
    checks.extend(guarded(&format!("{label}/bf16"), || {
        bf16_checks(label, spec, pair, target)
    }));
    if let Some(r) = &spec.reference {
        let name = format!("{label}/transformers");
        checks.extend(guarded(&name, || {
            Ok(vec![reference_check(&name, &pair.target, r)?])
        }));
    }
    checks
}

/// The target's f32 embeddings against the CPU's: relative difference and cosine.
fn f32_checks(label: &str, pair: &Pair) -> Result<Vec<Check>, BoxError> {
    let got = embed_texts(&pair.target, &texts(), &extract_options())?.data;
    Ok(embedding_pair(
        &format!("{label}/f32"),
        &got,
        pair,
        EMB_F32_REL,
        EMB_F32_COS,
        "f32",
    ))
}

/// The target's bf16 embeddings (a fresh load at bf16; DeBERTa-v2 always computes in f32)
/// against the CPU's f32 ones. A NaN anywhere is an error of the extraction, hence a FAIL.
fn bf16_checks(
    label: &str,
    spec: &EncoderSpec,
    pair: &Pair,
    target: &Device,
) -> Result<Vec<Check>, BoxError> {
    let enc = load_on(&spec.dir, target, DType::BF16)?;
    let got = embed_texts(&enc, &texts(), &extract_options())?.data;
    let dtype = format!("{:?}", enc.dtype()).to_lowercase();
    Ok(embedding_pair(
        &format!("{label}/bf16"),
        &got,
        pair,
        EMB_BF16_REL,
        EMB_BF16_COS,
        &dtype,
    ))
}

/// Two checks of target embeddings against the pair's CPU f32 ones.
fn embedding_pair(
    name: &str,
    got: &[f32],
    pair: &Pair,
    rel: f64,
    cos: f64,
    dtype: &str,
) -> Vec<Check> {
    let note = format!("{} texts, T {SEQ_LEN}, computed in {dtype}", TEXTS.len());
    vec![
        Check::new(
            format!("{name}/rel"),
            "max|de|/max|e_cpu|",
            rel_max_diff(got, &pair.cpu_embeddings),
            Bound::AtMost(rel),
        )
        .with_detail(note.clone()),
        Check::new(
            format!("{name}/cos"),
            "min cosine(e, e_cpu) over texts",
            min_row_cosine(got, &pair.cpu_embeddings, pair.cpu.width()),
            Bound::AtLeast(cos),
        )
        .with_detail(note),
    ]
}

/// The target's f32 masked-mean embedding of the reference's own ids against transformers'
/// (its `mean`, or its `hidden` states pooled with its mask).
fn reference_check(name: &str, enc: &LoadedEncoder, path: &Path) -> Result<Check, BoxError> {
    let exp = candle_core::safetensors::load(path, &Device::Cpu)?;
    let get = |k: &str| -> Result<&Tensor, BoxError> {
        exp.get(k)
            .ok_or_else(|| format!("{} has no tensor {k}", path.display()).into())
    };
    let ids = get("input_ids")?.to_dtype(DType::U32)?;
    let mask = get("attention_mask")?.to_dtype(DType::F32)?;
    let t = ids.dim(1)?;
    let want = match exp.get("mean") {
        Some(m) => m.clone(),
        None => pool(get("hidden")?, &mask, t, Pooling::MaskedMean)?,
    };
    let (ids_d, mask_d) = (ids.to_device(enc.device())?, mask.to_device(enc.device())?);
    let got = pool(
        &enc.hidden_states(&ids_d, &mask_d)?,
        &mask_d,
        t,
        Pooling::MaskedMean,
    )?;
    let value = rel_max_diff(&host(&got)?, &host(&want)?);
    Ok(Check::new(
        name,
        "max|de|/max|e_hf| (target f32)",
        value,
        Bound::AtMost(REFERENCE_REL),
    )
    .with_detail(format!(
        "{} sequences of {}",
        ids.dim(0)?,
        file_name(path.parent().unwrap_or(path))
    )))
}

/// Empty joint moments over the pairs' models (names and widths in order).
fn empty_moments(pairs: &[Pair]) -> Result<Moments, BoxError> {
    let names = pairs.iter().map(|p| p.cpu.name().to_string()).collect();
    let widths = pairs.iter().map(|p| p.cpu.width()).collect();
    Ok(Moments::new(names, widths)?)
}

/// `lmd`'s own streaming path (`embed_into_moments`, the one `lmd_table` runs) with the
/// target's f32 encoders against the CPU's, over the same texts.
fn moments_from_embeddings(pairs: &[Pair]) -> Result<Vec<Check>, BoxError> {
    let (mut on_cpu, mut on_target) = (empty_moments(pairs)?, empty_moments(pairs)?);
    let cpu: Vec<&dyn Encoder> = pairs.iter().map(|p| &p.cpu as &dyn Encoder).collect();
    let dev: Vec<&dyn Encoder> = pairs.iter().map(|p| &p.target as &dyn Encoder).collect();
    embed_into_moments(&cpu, &texts(), &extract_options(), 4, &mut on_cpu)?;
    embed_into_moments(&dev, &texts(), &extract_options(), 4, &mut on_target)?;
    moment_checks("moments/embed", &on_target, &on_cpu, MOMENTS_EMBED_REL)
}

/// The CPU's f32 embeddings stacked [n, D], accumulated on the target by
/// `Moments::update_tensor` against the host's `Moments::update_stacked`.
fn moments_on_device(pairs: &[Pair], target: &Device) -> Result<Vec<Check>, BoxError> {
    let (n, d) = (
        TEXTS.len(),
        pairs.iter().map(|p| p.cpu.width()).sum::<usize>(),
    );
    let mut stacked = Vec::with_capacity(n * d);
    for r in 0..n {
        for p in pairs {
            let w = p.cpu.width();
            stacked.extend_from_slice(&p.cpu_embeddings[r * w..(r + 1) * w]);
        }
    }
    let (mut on_host, mut on_target) = (empty_moments(pairs)?, empty_moments(pairs)?);
    on_host.update_stacked(&stacked)?;
    on_target.update_tensor(&Tensor::from_vec(stacked, (n, d), target)?)?;
    moment_checks("moments/f64", &on_target, &on_host, MOMENTS_F64_REL)
}

/// The covariance as a flat vector (column-major).
fn flat_covariance(m: &Moments) -> Result<Vec<f64>, BoxError> {
    let c = m.covariance()?;
    Ok((0..c.ncols())
        .flat_map(|j| (0..c.nrows()).map(move |i| (i, j)))
        .map(|(i, j)| c[(i, j)])
        .collect())
}

/// Mean and covariance of two moments, relative to the reference's largest entry.
fn moment_checks(
    name: &str,
    got: &Moments,
    want: &Moments,
    tol: f64,
) -> Result<Vec<Check>, BoxError> {
    if got.n() != want.n() {
        return Err(format!(
            "{name}: {} samples on the target, {} on the CPU",
            got.n(),
            want.n()
        )
        .into());
    }
    let note = format!(
        "{} models, D {}, n {}",
        want.names().len(),
        want.dim(),
        want.n()
    );
    let mean = rel_max_diff(&got.mean()?, &want.mean()?);
    let cov = rel_max_diff(&flat_covariance(got)?, &flat_covariance(want)?);
    let check = |aspect: &str, metric, value| {
        Check::new(
            format!("{name}/{aspect}"),
            metric,
            value,
            Bound::AtMost(tol),
        )
        .with_detail(note.clone())
    };
    Ok(vec![
        check("mean", "max|dmean|/max|mean_cpu|", mean),
        check("cov", "max|dcov|/max|cov_cpu|", cov),
    ])
}
