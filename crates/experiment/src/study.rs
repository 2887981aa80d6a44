//! A two-tower study: several runs (styles × seeds) on one corpus, each scored on its style's
//! fixed scoring set, compared pairwise with the noise ceiling, summarised per POS tag; the
//! tables, figures and a JSON summary written to one folder. [`Protocol`] names the
//! reproduction protocols (`smoke` for tests, `cpu`, `gpu`).

use std::path::{Path, PathBuf};

use prefscore::{Bootstrap, CorrOptions, ScoreKind};
use serde::{Deserialize, Serialize};
use towers::{ElmoMode, Style};

use crate::analysis::{compare_runs, PairComparison, RunScores, TokenSelection};
use crate::controls::{controls_table, run_controls, score_figures, RunControl};
use crate::data::CorpusData;
use crate::emergence::{emergence, write_emergence, Emergence, EmergenceSpec};
use crate::error::{io_at, write_json_atomic};
use crate::groups::{word_groups, WordGroupSettings};
use crate::pieces::{piece_classes, piece_control, piece_tables, PieceControl};
use crate::pos::{lexicon, TagSource};
use crate::run::{ensure_run, RunOptions};
use crate::scoring::{ScoringSet, ScoringSpec, ScoringText};
use crate::spec::{CorpusSpec, HeadSettings, Phase1Settings, RunSpec, Vocabulary};
pub use crate::tables::StudyRun;
use crate::tables::{pairs_table, pos_figure, runs_table};
use crate::{ExperimentError, Result};

/// Split-null replicates per run in the controls table.
const NULL_REPLICATES: usize = 100;

/// The reproduction protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// The same code as `cpu` in about a minute: tiny GPT towers (two seeds) and a tiny BERT on
    /// the embedded synthetic corpus (gold word classes). For tests.
    Smoke,
    /// The paper's experiment at CPU scale: WikiText-2 train, the paper's bert-base-uncased
    /// WordPiece vocabulary, `peer_small` towers at one budget of 8M tokens each: GPT seeds
    /// 0-2, as-released (forward-only) ELMo seeds 0-1, BERT seeds 0-1, full BiLSTM ELMo seeds
    /// 0-1, and GPT `peer_large` seed 0 (the size pair); scored on WikiText-103 valid + test,
    /// POS tags from the EWT-trained tagger, the agreement at 1/8, 1/4, 1/2 and all of phase 1.
    Cpu,
    /// `cpu` scaled for a GPU: `base_2tower` towers (size pair `large_2tower`), longer training.
    Gpu,
}

impl std::str::FromStr for Protocol {
    type Err = ExperimentError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "smoke" => Ok(Protocol::Smoke),
            "cpu" => Ok(Protocol::Cpu),
            "gpu" => Ok(Protocol::Gpu),
            _ => Err(ExperimentError::Invalid(format!(
                "unknown protocol {s:?} (smoke, cpu, gpu)"
            ))),
        }
    }
}

/// Everything a study runs and reports.
#[derive(Debug, Clone, PartialEq)]
pub struct StudySpec {
    /// Training text and tokenizer.
    pub corpus: CorpusSpec,
    /// How the scoring sets are cut (the runs' sequence length) and from which text.
    pub scoring: ScoringSpec,
    /// The runs, in table order.
    pub runs: Vec<RunSpec>,
    /// Token selections of the correlations.
    pub selections: Vec<TokenSelection>,
    /// Score kinds (arithmetic eq. 4 first).
    pub kinds: Vec<ScoreKind>,
    /// Bootstrap resamples and permutations of every correlation.
    pub resamples: usize,
    /// Where POS tags come from.
    pub tags: TagSource,
    /// The ICA word groups (Table 3, Fig. 5, 6) of one run, by label, written to
    /// `ica_<label>/` (`None`: not run).
    pub word_groups: Option<(String, WordGroupSettings)>,
    /// The emergence analysis over the runs' phase-1 snapshots (`None`: not run).
    pub emergence: Option<EmergenceSpec>,
}

impl StudySpec {
    /// The spec of a protocol; `shared` is the shared data folder (`../shared/data`) for the
    /// real-text protocols.
    pub fn protocol(p: Protocol, shared: &Path) -> Result<Self> {
        let tags = |shared: &Path| TagSource::Tagger {
            conllu: shared.join("ud-english-ewt/en_ewt-ud-train.conllu"),
            tagger_cache: PathBuf::from("tagger.json"),
        };
        match p {
            Protocol::Smoke => {
                let corpus = CorpusSpec::synthetic(300, 0);
                let phase1 = Phase1Settings {
                    budget_tokens: 120_000,
                    seq_len: 32,
                    batch_size: 16,
                    lr: 3e-3,
                    eval_batches: 4,
                    eval_every: 20,
                    snapshots: vec![0.5],
                    ..Phase1Settings::default()
                };
                let heads = HeadSettings {
                    max_budget_tokens: 120_000,
                    lr: 3e-3,
                    eval_every: 10,
                    patience: 2,
                    ..HeadSettings::default()
                };
                let run = |style, seed| {
                    let mut r = RunSpec::new(style, "tiny", corpus.clone()).with_seed(seed);
                    r.phase1 = phase1.clone();
                    r.heads = heads.clone();
                    r
                };
                Ok(Self {
                    scoring: ScoringSpec::new(32),
                    runs: vec![run(Style::Gpt, 0), run(Style::Gpt, 1), run(Style::Bert, 0)],
                    corpus,
                    selections: vec![
                        TokenSelection::TopFrequent(5000),
                        TokenSelection::MinCount(5),
                    ],
                    kinds: vec![ScoreKind::ArithmeticMean, ScoreKind::GeometricMean],
                    resamples: 100,
                    tags: TagSource::Gold,
                    word_groups: Some((
                        "gpt-s0".into(),
                        WordGroupSettings {
                            top_n: 300,
                            dim: 16,
                            ..WordGroupSettings::default()
                        },
                    )),
                    emergence: Some(EmergenceSpec {
                        selection: TokenSelection::MinCount(5),
                        models: vec!["gpt".into()],
                    }),
                })
            }
            Protocol::Cpu | Protocol::Gpu => {
                let gpu = p == Protocol::Gpu;
                let wiki = shared.join("wikitext-2/train.txt");
                // The paper's vocabulary: bert-base-uncased WordPiece (V 30,522, lowercased).
                let corpus = CorpusSpec::text(wiki.display().to_string(), "wikitext", None)
                    .with_vocabulary(&Vocabulary::bert_base_uncased(shared));
                // One token budget for every style (about 3 epochs of WikiText-2 on the CPU);
                // the paper's rule was equal wall-clock (about a day each), which every run's
                // record states beside it (tokens/s of phase 1).
                let phase1 = Phase1Settings {
                    budget_tokens: if gpu { 200_000_000 } else { 8_000_000 },
                    seq_len: 128,
                    batch_size: if gpu { 64 } else { 16 },
                    lr: 1e-3,
                    eval_batches: 16,
                    eval_every: 500,
                    // The agreement curve: 1/8, 1/4, 1/2 and all of phase 1.
                    snapshots: vec![0.125, 0.25, 0.5],
                    ..Phase1Settings::default()
                };
                let heads = HeadSettings {
                    max_budget_tokens: if gpu { 20_000_000 } else { 2_000_000 },
                    lr: 1e-3,
                    eval_every: 100,
                    patience: 3,
                    ..HeadSettings::default()
                };
                let (preset, large) = match gpu {
                    true => ("base_2tower", "large_2tower"),
                    false => ("peer_small", "peer_large"),
                };
                let run = |style, seed| {
                    let mut r = RunSpec::new(style, preset, corpus.clone()).with_seed(seed);
                    r.phase1 = phase1.clone();
                    r.heads = heads.clone();
                    r
                };
                let released = |seed| run(Style::Elmo, seed).with_elmo_mode(ElmoMode::AsReleased);
                let mut gpt_large = run(Style::Gpt, 0).named("gpt_large");
                gpt_large.preset = large.into();
                let scoring = ScoringSpec {
                    text: Some(ScoringText {
                        paths: ["wiki.valid.tokens", "wiki.test.tokens"]
                            .map(|f| shared.join("wikitext-103-valid-test").join(f))
                            .to_vec(),
                        format: "wikitext".into(),
                    }),
                    ..ScoringSpec::new(128)
                };
                Ok(Self {
                    scoring,
                    // The headline cells first (the paper's 0.94 and 0.91), then BERT, the
                    // full BiLSTM and the size pair: `--only` and resumption follow this order.
                    runs: vec![
                        run(Style::Gpt, 0),
                        run(Style::Gpt, 1),
                        run(Style::Gpt, 2),
                        released(0),
                        released(1),
                        run(Style::Bert, 0),
                        run(Style::Bert, 1),
                        run(Style::Elmo, 0),
                        run(Style::Elmo, 1),
                        gpt_large,
                    ],
                    corpus,
                    selections: vec![
                        TokenSelection::TopFrequent(5000),
                        TokenSelection::MinCount(prefscore::DEFAULT_MIN_COUNT),
                    ],
                    kinds: vec![ScoreKind::ArithmeticMean, ScoreKind::GeometricMean],
                    resamples: 1000,
                    tags: tags(shared),
                    // The paper's 5000 words at d = 128 on the width-128 embedding.
                    word_groups: Some(("gpt-s0".into(), WordGroupSettings::default())),
                    emergence: Some(EmergenceSpec {
                        selection: TokenSelection::TopFrequent(5000),
                        models: ["gpt", "elmo_released", "elmo", "bert"]
                            .map(String::from)
                            .to_vec(),
                    }),
                })
            }
        }
    }

    /// The same study with another vocabulary for every run (and so for its scoring sets,
    /// whose fingerprints hash the token ids).
    pub fn with_vocabulary(mut self, vocab: &Vocabulary) -> Self {
        self.corpus = self.corpus.with_vocabulary(vocab);
        for r in &mut self.runs {
            r.corpus = self.corpus.clone();
        }
        self
    }
}

/// The cluster statistics of a study's ICA word groups.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WordGroupSummary {
    /// The run.
    pub label: String,
    /// PCA dimension.
    pub dim: usize,
    /// Whether the ICA met its convergence rule.
    pub converged: bool,
    /// Share of words in no cluster.
    pub none: f64,
    /// Share of words in exactly one cluster.
    pub exactly_one: f64,
    /// Mean clusters per word.
    pub mean: f64,
}

/// What a study produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StudyOutcome {
    /// Whether the tables cover every run of the study (else a subset, see [`run_study`]).
    pub complete: bool,
    /// Where the tables and figures went.
    pub tables: PathBuf,
    /// The runs.
    pub runs: Vec<StudyRun>,
    /// Every pair of runs, per score kind and token selection.
    pub pairs: Vec<(String, PairComparison)>,
    /// Per run: frequency correlations and the split null (first score kind).
    pub controls: Vec<RunControl>,
    /// The ICA cluster statistics of the word-group run (paper: 13% of words in no cluster,
    /// 45% in exactly one, 1.45 per word).
    pub word_groups: Option<WordGroupSummary>,
    /// How the preference emerged during phase 1, when the spec asks for it.
    pub emergence: Option<Emergence>,
    /// The word-piece control (first score kind; WordPiece vocabularies only).
    pub pieces: Option<PieceControl>,
    /// Files written.
    pub outputs: Vec<PathBuf>,
}

/// Runs (or resumes, or reuses) every run of `spec` whose label is in `only` (all when
/// empty) under `out/<label>/`, then writes the tables and figures over those runs: to `out/`
/// when they are all the study's runs, else to `out/subset-<label>+<label>.../` (so a study
/// can be run and read in parts). A label in `only` that is not a run of the study is an error.
pub fn run_study(
    spec: &StudySpec,
    out: &Path,
    only: &[String],
    opts: &RunOptions,
) -> Result<StudyOutcome> {
    let labels: Vec<String> = spec.runs.iter().map(RunSpec::label).collect();
    if let Some(dup) = labels
        .iter()
        .enumerate()
        .find(|(i, l)| labels[..*i].contains(l))
    {
        return Err(ExperimentError::Invalid(format!(
            "two runs of the study are labelled {} (give one a model name)",
            dup.1
        )));
    }
    if let Some(bad) = only.iter().find(|l| !labels.contains(l)) {
        return Err(ExperimentError::Invalid(format!(
            "{bad} is not a run of this study ({})",
            labels.join(", ")
        )));
    }
    std::fs::create_dir_all(out).map_err(io_at(out))?;
    let data_dir = out.join("data");
    let data = CorpusData::load(&spec.corpus, &data_dir)?;
    let mut scored = Vec::new();
    let mut sets: Vec<ScoringSet> = Vec::new();
    for r in &spec.runs {
        let label = r.label();
        if !only.is_empty() && !only.contains(&label) {
            continue;
        }
        if !sets.iter().any(|s| s.id.style == r.style) {
            let set = ScoringSet::load_or_build(&data_dir, r.style, &data, &spec.scoring)?;
            opts.progress.say(|| {
                format!(
                    "{label}: scoring set {} ({} positions)",
                    set.id.short(),
                    set.id.positions
                )
            });
            sets.push(set);
        }
        let set = set_of(&sets, r.style)?;
        let run = ensure_run(r, &out.join(&label), &data, &data_dir, set, opts)?;
        scored.push(run);
    }
    let complete = scored.len() == spec.runs.len();
    let tables = match complete {
        true => out.to_path_buf(),
        false => {
            let names: Vec<&str> = scored.iter().map(|r| r.label.as_str()).collect();
            out.join(format!("subset-{}", names.join("+")))
        }
    };
    std::fs::create_dir_all(&tables).map_err(io_at(&tables))?;
    let out = tables.as_path();
    let boot = Bootstrap {
        resamples: spec.resamples,
        ..Bootstrap::default()
    };
    let copts = CorrOptions {
        bootstrap: boot,
        permutations: spec.resamples,
    };
    let mut outputs = Vec::new();
    let mut pairs = Vec::new();
    let mut runs = Vec::new();
    let mut controls = Vec::new();
    let mut pieces = None;
    let lex = lexicon(&data, &resolve_tags(&spec.tags, out), opts.progress.bars())?;
    let tags = lex.to_dense(data.padded_vocab());
    for (ki, &kind) in spec.kinds.iter().enumerate() {
        let kname = kind_name(kind);
        let rs: Vec<RunScores> = scored
            .iter()
            .map(|r| RunScores::new(r, kind))
            .collect::<Result<_>>()?;
        for sel in &spec.selections {
            let mut these = Vec::new();
            for i in 0..rs.len() {
                for j in i + 1..rs.len() {
                    these.push(compare_runs(
                        &rs[i], &rs[j], &data.freq, *sel, kind, &copts,
                    )?);
                }
            }
            let stem = format!("pairs_{kname}_{sel}");
            let t = pairs_table(&these, &format!("Run pairs, {kname} score, {sel} tokens"))?;
            outputs.extend(t.write_all(out, &stem)?);
            opts.progress.say(|| t.to_markdown());
            pairs.extend(these.into_iter().map(|p| (kname.to_string(), p)));
        }
        if ki > 0 {
            continue;
        }
        for (r, s) in scored.iter().zip(&rs) {
            let res = r.result()?;
            runs.push(StudyRun {
                label: r.label.clone(),
                dir: r.dir.clone(),
                scoring_fingerprint: r.record.scoring.short(),
                positions: res.positions,
                heads: res.heads.clone(),
                retest: res.retest.clone(),
                share_primary: s.share_primary,
                reused: r.reused,
            });
            let title = format!(
                "Preference score per UPOS tag, {} ({})",
                s.label,
                spec.tags.describe()
            );
            let (_, files) = pos_figure(s, &data.freq, &tags, 5000, &boot, &title, out)?;
            outputs.extend(files);
        }
        let t = runs_table(&runs);
        outputs.extend(t.write_all(out, "runs")?);
        opts.progress.say(|| t.to_markdown());
        let sel0 = spec.selections.first().map(|s| s.to_string());
        let main: Vec<PairComparison> = pairs
            .iter()
            .filter(|(k, p)| k == kname && Some(&p.selection) == sel0.as_ref())
            .map(|(_, p)| p.clone())
            .collect();
        let top = 5000;
        controls = run_controls(&rs, &main, &data.freq, top, kind, NULL_REPLICATES, &copts)?;
        let t = controls_table(&controls, NULL_REPLICATES);
        outputs.extend(t.write_all(out, "controls")?);
        outputs.extend(score_figures(&rs, &data.freq, top, out)?);
        let classes = piece_classes(&data.tok, data.padded_vocab())?;
        pieces = piece_control(&rs, &data.freq, &classes, top)?;
        if let Some(pc) = &pieces {
            let (t, p) = piece_tables(&pc.runs, &pc.pairs, top);
            outputs.extend(t.write_all(out, "pieces_runs")?);
            outputs.extend(p.write_all(out, "pieces_pairs")?);
            opts.progress
                .say(|| format!("{}\n{}", t.to_markdown(), p.to_markdown()));
        }
    }
    let mut ica = None;
    if let Some((label, settings)) = &spec.word_groups {
        if let Some(run) = scored.iter().find(|r| &r.label == label) {
            let (g, _, files) =
                word_groups(run, &data, settings, &out.join(format!("ica_{label}")))?;
            outputs.extend(files.table3.iter().cloned().chain([files.fig5, files.fig6]));
            ica = Some(WordGroupSummary {
                label: label.clone(),
                dim: g.dim,
                converged: g.ica.converged,
                none: g.counts.none,
                exactly_one: g.counts.exactly_one,
                mean: g.counts.mean,
            });
        }
    }
    let emergence = match &spec.emergence {
        Some(es)
            if scored
                .iter()
                .any(|r| es.models.contains(&r.record.spec.model_name())) =>
        {
            let e = emergence(&scored, &data.freq, es, &copts)?;
            outputs.extend(write_emergence(&e, out)?);
            Some(e)
        }
        _ => None,
    };
    let outcome = StudyOutcome {
        complete,
        tables: out.to_path_buf(),
        runs,
        pairs,
        controls,
        word_groups: ica,
        emergence,
        pieces,
        outputs,
    };
    write_json_atomic(&out.join("study.json"), &outcome)?;
    Ok(outcome)
}

fn set_of(sets: &[ScoringSet], style: Style) -> Result<&ScoringSet> {
    sets.iter()
        .find(|s| s.id.style == style)
        .ok_or_else(|| ExperimentError::Invalid(format!("no scoring set for {style:?}")))
}

/// A relative tagger cache lives in the study folder.
fn resolve_tags(t: &TagSource, out: &Path) -> TagSource {
    match t {
        TagSource::Tagger {
            conllu,
            tagger_cache,
        } if tagger_cache.is_relative() => TagSource::Tagger {
            conllu: conllu.clone(),
            tagger_cache: out.join(tagger_cache),
        },
        other => other.clone(),
    }
}

/// `arithmetic` (eq. 4) or `geometric` (the released code).
pub fn kind_name(kind: ScoreKind) -> &'static str {
    match kind {
        ScoreKind::ArithmeticMean => "arithmetic",
        ScoreKind::GeometricMean => "geometric",
    }
}
