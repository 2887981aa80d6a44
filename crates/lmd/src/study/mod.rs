//! The LMD study (Zhang, "Language Model Decomposition", Table 2 and its heatmaps) over local
//! model folders.
//!
//! [`run_lmd_study`] samples, for every sequence length T, sequences of exactly T BERT-uncased
//! word pieces from disjoint train and test documents, embeds them with every model (pooled
//! last hidden layer) and streams them, chunk by chunk, into the joint first and second moments
//! of each split (memory O(D² + chunk·D), D = Σ d: never the n × D embeddings), then fits every
//! model on the others in closed form from the train moments. Each fit is scored on the test
//! moments:
//!
//! - **held-out R²** of a target on a basis: 1 − SSR / SST of the linear prediction of the
//!   target's embedding from the basis embeddings, pooled over the target's dimensions
//!   (pairwise: one basis model; group: all the other models);
//! - **group ρ**: the mean over models of their group R²; pairwise ρ(u, v) is the mean of
//!   R²(u | v) and R²(v | u);
//! - every R² table and heatmap is oriented **rows = target, columns = basis**
//!   ([`crate::tables::ORIENTATION`]); Table 2 has one row per model, one column per T.
//!
//! The moments of a split are cut into [`LmdStudySpec::shards`] sample ranges, each a file under
//! `<out>/moments/T<t>/` keyed by what it was computed from ([`crate::shard::ExtractKey`]: the
//! models' files, device, dtype, pooling, T, the texts): a rerun reuses finished shards, resumes
//! an interrupted one exactly and recomputes a stale one. [`extract_lmd_shard`] computes one
//! shard only (one process per GPU or cluster job); [`run_lmd_study`] with
//! [`LmdStudySpec::merge_only`] then merges the shards (keys checked, sums exact) and analyses.
//!
//! [`planted_check`] runs the same analysis on synthetic embeddings with a planted linear
//! structure whose population group R² is known in closed form.
//!
//! Progress (bars, messages) goes through the caller's [`report::Progress`]; the study never
//! prints.
//!
//! # Examples
//!
//! Two local models, a tiny sample, each model's group R² (the program of
//! `examples/library_lmd.rs`):
//!
//! ```no_run
//! use lmd::study::{run_lmd_study, LmdStudySpec};
//! use report::Progress;
//!
//! fn main() -> Result<(), lmd::LmdError> {
//!     let shared = std::path::Path::new("../shared");
//!     let mut spec = LmdStudySpec::new(
//!         vec![
//!             shared.join("models/all-MiniLM-L6-v2"),
//!             shared.join("data/stories260K"),
//!         ],
//!         shared.join("data/wikitext-2/train.txt"),
//!         shared.join("data/bert-base-uncased/vocab.txt"),
//!     );
//!     // Tiny sizes: the fits need more train sequences than the widest model (d = 384).
//!     (spec.ts, spec.n_train, spec.n_test) = (vec![16], 512, 128);
//!     let outcome = run_lmd_study(&spec, "out/library_lmd".as_ref(), &Progress::silent())?;
//!     for (model, r2) in outcome.models.iter().zip(&outcome.per_t[0].group_r2) {
//!         println!("{model}: group R² {r2:.3}");
//!     }
//!     Ok(())
//! }
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use corpus::{Document, Documents, SamplerConfig, SequenceSampler, Split, Tokenizer};
use report::Progress;
use serde::{Deserialize, Serialize};

use crate::analysis::{analyze, Analysis};
use crate::encoder::{load, Encoder, LoadOptions, LoadedEncoder};
use crate::error::io_at;
use crate::extract::ExtractOptions;
use crate::fit::Ridge;
use crate::moments::Moments;
use crate::shard::{
    merge_shards, shard_moments, ExtractKey, ModelKey, Shard, ShardStatus, StreamSettings,
};
use crate::similarity::{sample_indices, similarity, write_similarity, KnnSample};
use crate::store::EmbeddingStore;
use crate::tables::write_analysis;
use crate::{LmdError, Result};

pub mod planted;
mod spec;
mod write;

pub use planted::{planted_check, PlantedOutcome};
pub use spec::{parse_ridge, ridge_text, ComputeDType, LmdSampler, LmdStudySpec};
use write::{write_table2, write_table2_heatmap};

/// A model left out of a study because its position table is shorter than the largest T.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeftOutModel {
    /// The model's name.
    pub name: String,
    /// The most tokens it accepts.
    pub max_tokens: usize,
    /// The largest T of the study.
    pub t_max: usize,
}

/// The results of one sequence length T.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LmdTOutcome {
    /// The sequence length.
    pub t: usize,
    /// Training sequences actually sampled.
    pub n_train: usize,
    /// Test sequences actually sampled.
    pub n_test: usize,
    /// Held-out group R² of each model on all the others, in the order of
    /// [`LmdStudyOutcome::models`].
    pub group_r2: Vec<f64>,
    /// Group ρ: the mean of `group_r2`.
    pub group_rho: f64,
    /// The pairwise R², pairwise ρ, CKA and group tables and heatmaps under `<out>/T<t>/`.
    pub files: Vec<PathBuf>,
    /// The similarity table (measure × pair, with the null), its agreement table and one
    /// heatmap per measure under `<out>/T<t>/` (empty when the spec has no similarity).
    #[serde(default)]
    pub similarity: Vec<PathBuf>,
}

/// What [`run_lmd_study`] computed and wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LmdStudyOutcome {
    /// Names of the models analysed (rows of Table 2).
    pub models: Vec<String>,
    /// Models left out (position table shorter than the largest T).
    pub left_out: Vec<LeftOutModel>,
    /// One entry per T, in the spec's order.
    pub per_t: Vec<LmdTOutcome>,
    /// Table 2 (rows = models, columns = T, last row group ρ): CSV, Markdown and JSON.
    pub table2: Vec<PathBuf>,
    /// Table 2 as a heatmap (PNG).
    pub table2_heatmap: PathBuf,
    /// Table 2 as Markdown (not serialised: it is in the `.md` file).
    #[serde(skip)]
    pub table2_markdown: String,
    /// The moments store (every shard of every split and T; reused by a rerun).
    pub moments: PathBuf,
    /// The pooling's short name.
    pub pooling: String,
    /// The ridge's label.
    pub ridge: String,
    /// Wall-clock seconds of the whole study.
    pub seconds: f64,
}

impl LmdStudyOutcome {
    /// Group R² of `model` at every T (in the order of [`LmdStudyOutcome::per_t`]), or `None`
    /// when the study does not hold that model.
    pub fn group_r2_of(&self, model: &str) -> Option<Vec<f64>> {
        let i = self.models.iter().position(|m| m == model)?;
        Some(self.per_t.iter().map(|p| p.group_r2[i]).collect())
    }
}

/// What every T of one study shares.
struct Context<'a> {
    spec: &'a LmdStudySpec,
    encoders: Vec<&'a LoadedEncoder>,
    tokenizer: Tokenizer,
    docs: Vec<Document>,
    ridge: Ridge,
    out: &'a Path,
    progress: &'a Progress,
}

/// Runs the LMD study of `spec` into `out`: per T, sampling, the moments of each split streamed
/// shard by shard from every model (finished shards under `out/moments/` reused; with
/// [`LmdStudySpec::merge_only`] nothing is embedded and every shard must exist), merged, the
/// closed-form analysis written under `out/T<t>/`, then Table 2 (`out/table2.{csv,md,json}`) and
/// its heatmap (`out/table2_group_r2.png`). Says what it does through `progress` (and shows
/// extraction progress bars on stderr when it has bars).
///
/// Models whose position table is shorter than the largest T are left out (every T is analysed
/// over the same models); fewer than two remaining is an error.
pub fn run_lmd_study(
    spec: &LmdStudySpec,
    out: &Path,
    progress: &Progress,
) -> Result<LmdStudyOutcome> {
    let start = Instant::now();
    let encoders = prepare(spec, out, progress)?;
    let t_max = spec.ts.iter().copied().max().unwrap_or(0);
    let (active, left_out) = select_active(&encoders, t_max, progress)?;
    let ctx = Context::new(spec, active, out, progress)?;
    let mut per_t = Vec::with_capacity(spec.ts.len());
    for &t in &spec.ts {
        per_t.push(study_t(&ctx, t)?);
    }
    let (table, table2) = write_table2(&ctx, &per_t)?;
    let table2_heatmap = write_table2_heatmap(&ctx, &per_t)?;
    Ok(LmdStudyOutcome {
        models: ctx.encoders.iter().map(|e| e.name().to_string()).collect(),
        left_out,
        per_t: per_t.into_iter().map(|(_, o)| o).collect(),
        table2,
        table2_heatmap,
        table2_markdown: table.to_markdown(),
        moments: out.join("moments"),
        pooling: spec.pooling.as_str().into(),
        ridge: ctx.ridge.label(),
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Extracts one shard of every split and T of `spec` into `out/moments/` and stops (no
/// analysis): the work of one process of a sharded study. Returns the shard files. Run every
/// shard `i` of `0..spec.shards`, then [`run_lmd_study`] (with [`LmdStudySpec::merge_only`] on a
/// machine that should not embed) on the same `out`.
pub fn extract_lmd_shard(
    spec: &LmdStudySpec,
    shard: Shard,
    out: &Path,
    progress: &Progress,
) -> Result<Vec<PathBuf>> {
    if shard.count != spec.shards {
        let why = format!("the study is cut into {} shards", spec.shards);
        return Err(LmdError::bad_setting("shard", shard, why));
    }
    if spec.merge_only {
        let why = "a merge-only study extracts nothing";
        return Err(LmdError::bad_setting("merge_only", true, why));
    }
    let encoders = prepare(spec, out, progress)?;
    let t_max = spec.ts.iter().copied().max().unwrap_or(0);
    let (active, _) = select_active(&encoders, t_max, progress)?;
    let ctx = Context::new(spec, active, out, progress)?;
    let mut files = Vec::new();
    for &t in &spec.ts {
        let (opts, splits) = sample(&ctx, t)?;
        for (split, texts) in &splits {
            files.push(compute_shard(&ctx, split, texts, &opts, shard)?.0);
        }
        // The first shard's process also embeds the mutual k-NN sample into the store.
        if shard.index == 0 {
            knn_sample(&ctx, &splits[1].1, &opts)?;
        }
    }
    Ok(files)
}

/// Validates the spec, creates `out` and loads the models.
fn prepare(spec: &LmdStudySpec, out: &Path, progress: &Progress) -> Result<Vec<LoadedEncoder>> {
    spec.validate()?;
    std::fs::create_dir_all(out).map_err(io_at(out))?;
    load_encoders(spec, progress)
}

impl<'a> Context<'a> {
    fn new(
        spec: &'a LmdStudySpec,
        encoders: Vec<&'a LoadedEncoder>,
        out: &'a Path,
        progress: &'a Progress,
    ) -> Result<Self> {
        Ok(Self {
            spec,
            encoders,
            tokenizer: Tokenizer::load(&spec.tokenizer)?,
            docs: match spec.sampler {
                LmdSampler::Sampled => read_documents(spec, progress)?,
                LmdSampler::Reference => Vec::new(),
            },
            ridge: spec.ridge,
            out,
            progress,
        })
    }

    fn encoders(&self) -> Vec<&dyn Encoder> {
        self.encoders.iter().map(|e| *e as &dyn Encoder).collect()
    }

    /// The file of one shard of one split at T.
    fn shard_path(&self, t: usize, split: &str, shard: Shard) -> PathBuf {
        self.out.join("moments").join(format!("T{t}")).join(format!(
            "{split}-shard-{}-of-{}.safetensors",
            shard.index, shard.count
        ))
    }
}

/// Loads every model (on CUDA when available, at the spec's dtype; on the CPU at f32 for a
/// merge-only study, which only reads their keys); two models may not share a name.
fn load_encoders(spec: &LmdStudySpec, progress: &Progress) -> Result<Vec<LoadedEncoder>> {
    let opts = if spec.merge_only {
        LoadOptions::default()
    } else {
        LoadOptions::best_device(spec.dtype.dtype())
    };
    progress.say(|| format!("device {:?}, dtype {:?}", opts.device, opts.dtype));
    let mut encoders: Vec<LoadedEncoder> = Vec::with_capacity(spec.models.len());
    for dir in &spec.models {
        let enc = load(dir, &opts)?;
        progress.say(|| {
            format!(
                "loaded {:<28} {:<10} d = {:<5} max T = {}",
                enc.name(),
                enc.model_type(),
                enc.width(),
                enc.max_tokens()
            )
        });
        if let Some(other) = encoders.iter().find(|e| e.name() == enc.name()) {
            return Err(LmdError::DuplicateModel {
                name: enc.name().to_string(),
                first: other.source().to_path_buf(),
                second: dir.to_path_buf(),
            });
        }
        encoders.push(enc);
    }
    Ok(encoders)
}

/// The models that accept `t_max` tokens, and those left out (said when `progress`).
fn select_active<'a>(
    encoders: &'a [LoadedEncoder],
    t_max: usize,
    progress: &Progress,
) -> Result<(Vec<&'a LoadedEncoder>, Vec<LeftOutModel>)> {
    let (active, short): (Vec<&LoadedEncoder>, Vec<&LoadedEncoder>) =
        encoders.iter().partition(|e| e.max_tokens() >= t_max);
    let left_out: Vec<LeftOutModel> = short
        .iter()
        .map(|e| LeftOutModel {
            name: e.name().to_string(),
            max_tokens: e.max_tokens(),
            t_max,
        })
        .collect();
    for m in &left_out {
        progress.say(|| {
            format!(
                "leaving out {} (max {} tokens < T = {t_max})",
                m.name, m.max_tokens
            )
        });
    }
    if active.len() < 2 {
        let what = format!(
            "the models that accept T = {t_max} ({} left out)",
            left_out.len()
        );
        return Err(LmdError::too_little(what, active.len(), 2));
    }
    Ok((active, left_out))
}

/// Every document of the corpus.
fn read_documents(spec: &LmdStudySpec, progress: &Progress) -> Result<Vec<Document>> {
    let docs =
        Documents::open(&spec.corpus, spec.format.clone())?.collect::<corpus::Result<Vec<_>>>()?;
    progress.say(|| format!("corpus {}: {} documents", spec.corpus.display(), docs.len()));
    Ok(docs)
}

/// The texts of each split, named.
type SplitTexts = [(&'static str, Vec<String>); 2];

/// The extraction options and the (train, test) texts of T.
fn sample(ctx: &Context<'_>, t: usize) -> Result<(ExtractOptions, SplitTexts)> {
    let spec = ctx.spec;
    let (train, test) = match spec.sampler {
        LmdSampler::Sampled => {
            let cfg = SamplerConfig::new(t, spec.n_train, 0, spec.n_test, spec.seed);
            let splits = SequenceSampler::new(ctx.tokenizer.clone(), cfg)?
                .sample(ctx.docs.iter().cloned().map(Ok))?;
            (splits.texts(Split::Train), splits.texts(Split::Test))
        }
        LmdSampler::Reference => {
            let test_file = spec.test_corpus.as_deref().unwrap_or(&spec.corpus);
            let chunks = |path: &Path, n: usize| -> Result<Vec<String>> {
                let text = std::fs::read_to_string(path).map_err(io_at(path))?;
                let rows = corpus::text_rows(&text);
                let mut c = corpus::reference_chunks(
                    &ctx.tokenizer,
                    &rows,
                    t,
                    corpus::REFERENCE_GROUP_ROWS,
                )?;
                c.truncate(n);
                Ok(c)
            };
            (
                chunks(&spec.corpus, spec.n_train)?,
                chunks(test_file, spec.n_test)?,
            )
        }
    };
    ctx.progress.say(|| {
        format!(
            "T = {t}: {} train, {} test sequences",
            train.len(),
            test.len()
        )
    });
    let mut opts = ExtractOptions::new(t);
    opts.pooling = spec.pooling;
    opts.token_budget = spec.token_budget;
    opts.progress = ctx.progress.bars();
    Ok((opts, [("train", train), ("test", test)]))
}

/// One T: sampling, moments of both splits, analysis and its reports under `out/T<t>/`.
fn study_t(ctx: &Context<'_>, t: usize) -> Result<(Analysis, LmdTOutcome)> {
    let (opts, [(_, train), (_, test)]) = sample(ctx, t)?;
    let m_train = split_moments(ctx, "train", &train, &opts)?;
    let m_test = split_moments(ctx, "test", &test, &opts)?;
    let a = analyze(&m_train, &m_test, ctx.ridge)?;
    let dir = ctx.out.join(format!("T{t}"));
    let files = write_analysis(&dir, &a)?;
    let similarity_files = match &ctx.spec.similarity {
        None => Vec::new(),
        Some(params) => {
            let params = crate::similarity::SimilarityParams {
                ridge: ctx.ridge,
                ..params.clone()
            };
            let sample = knn_sample(ctx, &test, &opts)?;
            let s = similarity(&m_train, &m_test, sample.as_ref(), &params)?;
            ctx.progress.say(|| {
                format!(
                    "T = {t}: similarity of {} measures (each beside its null) in {}",
                    s.results.len(),
                    dir.display()
                )
            });
            write_similarity(&dir, &s)?
        }
    };
    ctx.progress.say(|| {
        format!(
            "T = {t}: group rho = {:.4}; tables and heatmaps in {}",
            a.group.rho(),
            dir.display()
        )
    });
    let outcome = LmdTOutcome {
        t,
        n_train: train.len(),
        n_test: test.len(),
        group_r2: a.group.r2.clone(),
        group_rho: a.group.rho(),
        files,
        similarity: similarity_files,
    };
    Ok((a, outcome))
}

/// The mutual k-NN sample of the test split: `knn_sample` sequences drawn by the similarity
/// seed, each model's embeddings read from the store under `<out>/embeddings/` (split
/// `knn-sample`) or embedded and stored there. A merge-only study embeds nothing: without the
/// stored sample (written by shard 0's process) it says so and leaves mutual k-NN out (`None`).
fn knn_sample(
    ctx: &Context<'_>,
    test: &[String],
    opts: &ExtractOptions,
) -> Result<Option<KnnSample>> {
    let Some(params) = &ctx.spec.similarity else {
        return Ok(None);
    };
    let texts: Vec<String> = sample_indices(test.len(), params.knn_sample, params.seed)
        .into_iter()
        .map(|i| test[i].clone())
        .collect();
    let store = EmbeddingStore::new(ctx.out.join("embeddings"));
    let mut blocks = Vec::with_capacity(ctx.encoders.len());
    for enc in ctx.encoders() {
        let e = if ctx.spec.merge_only {
            match store.load(enc, "knn-sample", &texts, opts)? {
                Some(e) => e,
                None => {
                    ctx.progress.say(|| {
                        format!(
                            "mutual k-NN left out: no stored sample of {} (run shard 0)",
                            enc.name()
                        )
                    });
                    return Ok(None);
                }
            }
        } else {
            store.get_or_embed(enc, "knn-sample", &texts, opts)?.0
        };
        blocks.push(e.data.iter().map(|&x| x as f64).collect());
    }
    let names = ctx.encoders.iter().map(|e| e.name().to_string()).collect();
    let widths = ctx.encoders.iter().map(|e| e.width()).collect();
    Ok(Some(KnnSample::new(names, widths, blocks)?))
}

/// One shard of one split streamed into its moments file (reused when finished, resumed when
/// interrupted); says what it did when `progress`.
fn compute_shard(
    ctx: &Context<'_>,
    split: &str,
    texts: &[String],
    opts: &ExtractOptions,
    shard: Shard,
) -> Result<(PathBuf, Moments)> {
    let path = ctx.shard_path(opts.t, split, shard);
    let settings = StreamSettings {
        chunk: ctx.spec.chunk,
        progress: ctx.progress.bars(),
        similarity_seed: ctx.spec.similarity.as_ref().map(|p| p.seed),
        ..StreamSettings::default()
    };
    let start = Instant::now();
    let (m, status) = shard_moments(&ctx.encoders(), texts, opts, shard, &path, &settings)?;
    ctx.progress.say(|| {
        let what = match status {
            ShardStatus::Reused => "reused".to_string(),
            ShardStatus::Resumed { from } => format!("resumed from {from} rows"),
            ShardStatus::Computed { replaced } if !replaced.is_empty() => {
                format!("recomputed (other {})", replaced.join(", "))
            }
            _ => "computed".to_string(),
        };
        format!(
            "  {split:<5} shard {shard}: {} sequences {what} in {:.1} s -> {}",
            m.n(),
            start.elapsed().as_secs_f64(),
            path.display()
        )
    });
    Ok((path, m))
}

/// Joint moments of one split: every shard computed (or reused) and merged, or, merge-only,
/// the shards' files merged after their keys are checked against these texts and models.
fn split_moments(
    ctx: &Context<'_>,
    split: &str,
    texts: &[String],
    opts: &ExtractOptions,
) -> Result<Moments> {
    let shards = Shard::all(ctx.spec.shards)?;
    if ctx.spec.merge_only {
        let models = ctx
            .encoders()
            .into_iter()
            .map(ModelKey::of)
            .collect::<Result<Vec<_>>>()?;
        let files: Vec<(PathBuf, ExtractKey)> = shards
            .iter()
            .map(|&s| {
                let rows = &texts[s.range(texts.len())];
                let key = ExtractKey::new(&models, rows, opts, s, ctx.spec.chunk)
                    .with_similarity(ctx.spec.similarity.as_ref().map(|p| p.seed));
                (ctx.shard_path(opts.t, split, s), key)
            })
            .collect();
        return merge_shards(&files);
    }
    let mut total: Option<Moments> = None;
    for shard in shards {
        let (_, m) = compute_shard(ctx, split, texts, opts, shard)?;
        match total.as_mut() {
            None => total = Some(m),
            Some(t) => t.merge(&m)?,
        }
    }
    total.ok_or_else(|| LmdError::too_little("the study's shards", 0, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path under the shared data folder (`/work/shared` beside the workspace); panics naming
    /// it when it is missing (the test must not pass silently without its inputs).
    fn shared(rel: &str) -> PathBuf {
        let p = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared")).join(rel);
        assert!(p.exists(), "shared test input {} is missing", p.display());
        p
    }

    #[test]
    fn missing_model_folder_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-model");
        let spec = LmdStudySpec::new(
            vec![missing.clone(), dir.path().to_path_buf()],
            dir.path().join("corpus.txt"),
            dir.path().join("vocab.txt"),
        );
        match run_lmd_study(&spec, &dir.path().join("out"), &Progress::silent()) {
            Err(LmdError::Missing { path, what }) => {
                assert_eq!(path, missing);
                assert!(what.contains("model"), "{what}");
            }
            other => panic!(
                "expected Missing naming {}, got {other:?}",
                missing.display()
            ),
        }
    }

    #[test]
    fn the_reference_sampler_takes_the_first_chunks_of_each_split_file() {
        let fixtures = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"));
        let models = vec![fixtures.join("bert"), fixtures.join("distilbert")];
        let mut spec = LmdStudySpec::new(
            models,
            shared("data/wikitext-2/valid.txt"),
            shared("data/bert-base-uncased/vocab.txt"),
        );
        spec.sampler = LmdSampler::Reference;
        (spec.ts, spec.n_train, spec.n_test) = (vec![16], 80, 30);
        let dir = tempfile::tempdir().unwrap();
        // Without the test split's file the spec is refused before anything is loaded.
        let e = run_lmd_study(&spec, dir.path(), &Progress::silent()).unwrap_err();
        assert!(e.to_string().contains("test corpus"), "{e}");
        spec.test_corpus = Some(shared("data/wikitext-2/test.txt"));
        let o = run_lmd_study(&spec, dir.path(), &Progress::silent()).unwrap();
        assert_eq!((o.per_t[0].n_train, o.per_t[0].n_test), (80, 30));
        assert!(o.per_t[0].group_r2.iter().all(|r| r.is_finite()));
        // The test moments are those of the first 30 reference chunks of the test file.
        let tok = corpus::Tokenizer::load(&spec.tokenizer).unwrap();
        let text = std::fs::read_to_string(spec.test_corpus.as_ref().unwrap()).unwrap();
        let chunks = corpus::reference_chunks(&tok, &corpus::text_rows(&text), 16, 1000).unwrap();
        let (m, meta) =
            Moments::load_with(dir.path().join("moments/T16/test-shard-0-of-1.safetensors"))
                .unwrap();
        assert_eq!(m.n(), 30);
        let key: serde_json::Value = serde_json::from_str(&meta["lmd.extract_key"]).unwrap();
        let want = format!("{:016x}", crate::extract::fingerprint(&chunks[..30]));
        assert_eq!(key["texts"], want);
    }

    #[test]
    fn study_over_two_local_models_writes_table2() {
        let models = vec![
            shared("models/all-MiniLM-L6-v2"),
            shared("data/stories260K"),
        ];
        // The WikiText-2 test file (1.2 MB): the sampler tokenizes the whole corpus, and the
        // train file is 9 times larger for no benefit at these sizes.
        let corpus = shared("data/wikitext-2/test.txt");
        let tokenizer = shared("data/bert-base-uncased/vocab.txt");
        let mut spec = LmdStudySpec::new(models, corpus, tokenizer);
        // The pairwise fits need more train rows than the widest basis (MiniLM, d = 384).
        (spec.ts, spec.n_train, spec.n_test) = (vec![16], 512, 64);
        let dir = tempfile::tempdir().unwrap();
        let o = run_lmd_study(&spec, dir.path(), &Progress::silent()).unwrap();
        assert_eq!(o.models, ["all-MiniLM-L6-v2", "stories260K"]);
        assert!(o.left_out.is_empty());
        assert_eq!(o.per_t.len(), 1);
        let t = &o.per_t[0];
        assert_eq!((t.t, t.n_train, t.n_test), (16, 512, 64));
        // 512 rows against a 384-dim basis overfit: held-out R² may well be negative here
        // (about -0.13 and -2.4); it must be finite and at most 1.
        assert!(
            t.group_r2.iter().all(|r| r.is_finite() && *r <= 1.0),
            "{t:?}"
        );
        assert!(o
            .table2
            .iter()
            .chain([&o.table2_heatmap])
            .all(|f| f.is_file()));
        assert!(o.table2_markdown.contains("stories260K"));
        assert_eq!(o.group_r2_of("stories260K").unwrap(), [t.group_r2[1]]);
    }
}
