//! Analyses as values: an [`Analysis`] is one table or figure of a study (or a few that share
//! their numbers) with a name, a typed output, a pure [`Analysis::compute`] over the scored runs
//! and their [`StudyContext`], a [`Analysis::write`] of that output into tables and figures, and
//! the [`Input`]s it reads besides the scores. [`crate::study::analyze`] runs a list of them
//! ([`builtin`] and any of the caller's own, boxed as [`Unit`]s) in order: each unit whose
//! inputs are present is computed into [`Outputs`] (`study.json` maps each unit's name to its
//! output), then written; the others are left out with the reason ([`LeftOut`]).
//!
//! Adding a built-in table is one module here (its output type, its `impl Analysis`) and one
//! line in [`builtin`]; a user's own analysis is one type of theirs, pushed onto the list.

use std::any::Any;
use std::path::{Path, PathBuf};

use prefscore::{CorrOptions, ScoreKind};
use serde::{Deserialize, Serialize};

use crate::analysis::{RunScores, TopTokens};
use crate::data::CorpusData;
use crate::error::{ExperimentError, Result};
use crate::protocol::StudySpec;
use crate::run::ScoredRun;
use report::Progress;

pub mod controls;
pub mod emergence;
pub mod orientation;
pub mod pairs;
pub mod pieces;
pub mod pos;
pub mod predictability;
pub mod runs;
pub mod score_figures;
pub mod split_scoring;
pub mod table4;
pub mod word_groups;

/// Split-null replicates per run in the controls (and the orientation's null).
pub const NULL_REPLICATES: usize = 100;
/// The most frequent training tokens of the per-run tables and figures (the paper's 5000).
pub const TOP_TOKENS: usize = 5000;

/// What an analysis reads besides the runs' manifests and scores files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Input {
    /// The runs' `scores.safetensors` and manifests: what [`ScoredRun::load`] reads, always
    /// present.
    Scores,
    /// The vocabulary each run folder carries (`tokenizer/tokenizer.json`).
    Vocabulary,
    /// The training text named by the runs' manifests (synthetic: regenerated; a text corpus:
    /// its path): token frequencies and part-of-speech tags. Needs [`Input::Vocabulary`].
    Corpus,
    /// The trained phase-1 weights (`phase1/checkpoint/weights.safetensors`) of every run.
    Weights,
}

impl std::fmt::Display for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Input::Scores => "the scores",
            Input::Vocabulary => "the vocabulary",
            Input::Corpus => "the corpus",
            Input::Weights => "the model's weights",
        })
    }
}

/// One analysis of a study: a name, a typed output, a pure computation over the scored runs
/// and a writer of its tables and figures (the anchors: scikit-learn's metrics and HF
/// `evaluate`, a measure as a value with a name and a typed result).
pub trait Analysis {
    /// The unit's numbers: its entry of `study.json`.
    type Output: Serialize + 'static;

    /// Its name: its key in `study.json` and [`Outputs`], and in messages.
    fn name(&self) -> &str;

    /// What it reads besides the scores ([`Input::Scores`] is always present); a unit whose
    /// inputs are missing is left out, saying which.
    fn needs(&self) -> &[Input] {
        &[]
    }

    /// Its numbers over `ctx.runs`, reading earlier units' outputs from `earlier`; `None`
    /// when the study does not ask for it (e.g. no word groups named). Writes nothing.
    fn compute(&self, ctx: &StudyContext<'_>, earlier: &Outputs) -> Result<Option<Self::Output>>;

    /// Its tables and figures of `output` into `ctx.out`, every file pushed onto `files`;
    /// `all` holds every unit's output.
    fn write(
        &self,
        output: &Self::Output,
        ctx: &StudyContext<'_>,
        all: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()>;
}

/// An [`Analysis`] with its output type erased, so that a list holds units of any output (every
/// `Analysis` is one). What [`crate::study::analyze`] takes.
pub trait Unit {
    /// [`Analysis::name`].
    fn name(&self) -> &str;
    /// [`Analysis::needs`].
    fn needs(&self) -> &[Input];
    /// [`Analysis::compute`], its output boxed with its JSON.
    fn compute_output(&self, ctx: &StudyContext<'_>, earlier: &Outputs) -> Result<Option<Output>>;
    /// [`Analysis::write`] of an output this unit computed.
    fn write_output(
        &self,
        output: &Output,
        ctx: &StudyContext<'_>,
        all: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()>;
}

impl<A: Analysis> Unit for A {
    fn name(&self) -> &str {
        Analysis::name(self)
    }

    fn needs(&self) -> &[Input] {
        Analysis::needs(self)
    }

    fn compute_output(&self, ctx: &StudyContext<'_>, earlier: &Outputs) -> Result<Option<Output>> {
        let Some(value) = self.compute(ctx, earlier)? else {
            return Ok(None);
        };
        let json = serde_json::to_value(&value).map_err(|source| ExperimentError::Json {
            path: ctx.out.join("study.json"),
            source,
        })?;
        Ok(Some(Output {
            name: Analysis::name(self).to_string(),
            value: Box::new(value),
            json,
        }))
    }

    fn write_output(
        &self,
        output: &Output,
        ctx: &StudyContext<'_>,
        all: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        match output.value.downcast_ref::<A::Output>() {
            Some(v) => self.write(v, ctx, all, files),
            None => Err(ExperimentError::mismatch(
                format!("the output named {}", output.name),
                format!("the analysis {}", Analysis::name(self)),
                "an output is written by the unit that computed it",
            )),
        }
    }
}

/// One unit's output: typed (read with [`Outputs::get`]) and as JSON (its `study.json` entry).
pub struct Output {
    name: String,
    value: Box<dyn Any>,
    json: serde_json::Value,
}

impl Output {
    /// The unit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its JSON, as in `study.json`.
    pub fn json(&self) -> &serde_json::Value {
        &self.json
    }
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("name", &self.name)
            .field("json", &self.json)
            .finish()
    }
}

/// The outputs of the units computed so far, in the order they ran; serialized as a map from
/// unit name to output (`study.json`'s `units`).
#[derive(Debug, Default)]
pub struct Outputs(Vec<Output>);

impl Outputs {
    /// The output of type `T` (each built-in unit has an output type of its own), if its unit
    /// ran.
    pub fn get<T: 'static>(&self) -> Option<&T> {
        self.0.iter().find_map(|o| o.value.downcast_ref::<T>())
    }

    /// The output of type `T`, or an error saying that `unit` reads it (its unit left out, or
    /// not listed before `unit`).
    pub fn require<T: 'static>(&self, unit: &str, of: &str) -> Result<&T> {
        self.get::<T>().ok_or_else(|| {
            ExperimentError::mismatch(
                format!("the analysis {unit}"),
                "the analyses listed before it",
                format!("it reads the output of {of}: list {of} before it"),
            )
        })
    }

    /// The output of the unit named `name`.
    pub fn named(&self, name: &str) -> Option<&Output> {
        self.0.iter().find(|o| o.name == name)
    }

    /// The units' names, in the order they ran.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|o| o.name.as_str())
    }

    /// Every output, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Output> {
        self.0.iter()
    }

    fn push(&mut self, o: Output) {
        self.0.push(o);
    }
}

impl Serialize for Outputs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for o in &self.0 {
            m.serialize_entry(&o.name, &o.json)?;
        }
        m.end()
    }
}

/// A unit left out of a study, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeftOut {
    /// The unit's name.
    pub unit: String,
    /// The input it lacked.
    pub input: Input,
    /// Why that input is missing (the path looked for).
    pub why: String,
}

/// What a study's analyses produced: every unit's output (`study.json`) and the files written.
#[derive(Debug, Default, Serialize)]
pub struct StudyOutcome {
    /// Whether the tables cover every run of the study (else a subset, see
    /// [`crate::study::run_study`]).
    pub complete: bool,
    /// Where the tables and figures went.
    pub tables: PathBuf,
    /// Each unit's output, by unit name, in the order they ran.
    pub units: Outputs,
    /// The units left out for want of an input.
    pub left_out: Vec<LeftOut>,
    /// Files written.
    pub outputs: Vec<PathBuf>,
}

impl StudyOutcome {
    /// The output of type `T` ([`Outputs::get`]).
    pub fn get<T: 'static>(&self) -> Option<&T> {
        self.units.get::<T>()
    }
}

/// Which of the [`Input`]s a study's runs have, and why the others are missing.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    missing: Vec<(Input, String)>,
}

impl Inputs {
    /// The inputs of `runs` (whose corpus was loaded or not: `data`).
    pub fn of(runs: &[ScoredRun], data: Option<&CorpusData>) -> Self {
        let mut missing = Vec::new();
        let vocab = runs
            .iter()
            .map(|r| r.dir.join(&r.manifest.tokenizer))
            .find(|p| !p.is_file());
        if let Some(p) = &vocab {
            missing.push((Input::Vocabulary, format!("{} is missing", p.display())));
        }
        if data.is_none() {
            let text = runs
                .first()
                .and_then(|r| match &r.manifest.spec.corpus.source {
                    crate::spec::Corpus::Text { path, .. } if !path.exists() => Some(path),
                    _ => None,
                });
            let why = match (&vocab, text) {
                (Some(_), _) => "its tokens are counted with the runs' vocabulary".to_string(),
                (None, Some(p)) => format!("{} is missing", p.display()),
                (None, None) => "the runs' corpus was not read".to_string(),
            };
            missing.push((Input::Corpus, why));
        }
        let weights = (runs.iter())
            .filter(|r| r.model.is_none())
            .map(|r| crate::run::final_weights(&r.dir))
            .find(|p| !p.is_file());
        if let Some(p) = weights {
            missing.push((Input::Weights, format!("{} is missing", p.display())));
        }
        Self { missing }
    }

    /// Why `input` is missing, or `None` when it is present.
    pub fn missing(&self, input: Input) -> Option<&str> {
        (self.missing.iter())
            .find(|(i, _)| *i == input)
            .map(|(_, why)| why.as_str())
    }
}

/// Where a study's corpus comes from when its runs carry their vocabulary: whether the text can
/// be read (a synthetic corpus is regenerated; a text corpus must be at its path).
pub(crate) fn corpus_readable(runs: &[ScoredRun]) -> bool {
    let Some(first) = runs.first() else {
        return false;
    };
    let vocab = runs
        .iter()
        .all(|r| r.dir.join(&r.manifest.tokenizer).is_file());
    vocab
        && match &first.manifest.spec.corpus.source {
            crate::spec::Corpus::Synthetic { .. } => true,
            crate::spec::Corpus::Text { path, .. } => path.exists(),
        }
}

/// What every unit reads: the study, its data (when its corpus could be read) and scored runs,
/// their scores per score kind (first kind: the main tables'), the correlation options, the
/// tables folder and the caller's progress.
pub struct StudyContext<'a> {
    /// The study.
    pub spec: &'a StudySpec,
    /// Its text, tokenizer and frequencies ([`Input::Corpus`]).
    pub data: Option<&'a CorpusData>,
    /// The scored runs, in table order.
    pub runs: &'a [ScoredRun],
    /// The runs' scores under each of `spec.kinds`.
    pub scores: Vec<(ScoreKind, Vec<RunScores>)>,
    /// Bootstrap and permutations of every correlation.
    pub copts: CorrOptions,
    /// Which inputs are present.
    pub inputs: Inputs,
    /// Where tables and figures go.
    pub out: &'a Path,
    /// Messages and progress bars.
    pub progress: &'a Progress,
}

impl<'a> StudyContext<'a> {
    /// The context of `runs` of `spec` (with their corpus `data` when it was read), their
    /// scores computed under every score kind.
    pub fn new(
        spec: &'a StudySpec,
        data: Option<&'a CorpusData>,
        runs: &'a [ScoredRun],
        out: &'a Path,
        progress: &'a Progress,
    ) -> Result<Self> {
        let scores = spec
            .kinds
            .iter()
            .map(|&k| {
                let rs = runs.iter().map(|r| RunScores::new(r, k));
                Ok((k, rs.collect::<Result<_>>()?))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            spec,
            data,
            runs,
            scores,
            copts: CorrOptions::with_resamples(spec.resamples),
            inputs: Inputs::of(runs, data),
            out,
            progress,
        })
    }

    /// The main score kind (the first) and the runs' scores under it.
    pub fn main(&self) -> Option<(ScoreKind, &[RunScores])> {
        self.scores.first().map(|(k, rs)| (*k, rs.as_slice()))
    }

    /// The runs' corpus data, or an error naming `unit` (which should have declared
    /// [`Input::Corpus`]).
    pub fn data(&self, unit: &str) -> Result<&'a CorpusData> {
        self.data.ok_or_else(|| {
            ExperimentError::mismatch(
                format!("the analysis {unit}"),
                "the study's inputs",
                "it reads the corpus and does not declare Input::Corpus",
            )
        })
    }

    /// The runs' labels, in table order.
    pub fn labels(&self) -> Vec<String> {
        self.runs.iter().map(|r| r.label.clone()).collect()
    }

    /// The paper's selection of the per-run tables: the [`TOP_TOKENS`] most frequent training
    /// tokens of the corpus (`unit` names the caller in the error where it was not read).
    pub fn top(&self, unit: &str) -> Result<TopTokens<'a>> {
        Ok(TopTokens {
            freq: &self.data(unit)?.freq,
            n: TOP_TOKENS,
        })
    }

    /// Writes `t` as `<stem>.{csv,md,json}` into `dir`, says it, records the files.
    pub fn table(
        &self,
        t: &report::Table,
        dir: &Path,
        stem: &str,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        files.extend(t.write_all(dir, stem)?);
        self.progress.say(|| t.to_markdown());
        Ok(())
    }

    /// Computes `units` in order into an outcome (nothing written): a unit whose inputs are
    /// missing is left out, and the left-out units said in one line through the progress.
    pub fn compute(&self, units: &[Box<dyn Unit + '_>], complete: bool) -> Result<StudyOutcome> {
        let mut o = StudyOutcome {
            complete,
            tables: self.out.to_path_buf(),
            ..StudyOutcome::default()
        };
        for u in units {
            let lacking = (u.needs().iter()).find_map(|&i| self.inputs.missing(i).map(|w| (i, w)));
            if let Some((input, why)) = lacking {
                o.left_out.push(LeftOut {
                    unit: u.name().to_string(),
                    input,
                    why: why.to_string(),
                });
                continue;
            }
            if let Some(out) = u.compute_output(self, &o.units)? {
                o.units.push(out);
            }
        }
        if !o.left_out.is_empty() {
            let said: Vec<String> = (o.left_out.iter())
                .map(|l| format!("{} (needs {}: {})", l.unit, l.input, l.why))
                .collect();
            self.progress
                .say(|| format!("analyses left out: {}", said.join("; ")));
        }
        Ok(o)
    }

    /// Every table and figure of the outcome's units into the tables folder (each by the unit
    /// of `units` that computed it, in order), the files recorded in `o.outputs`.
    pub fn write(&self, units: &[Box<dyn Unit + '_>], o: &mut StudyOutcome) -> Result<()> {
        std::fs::create_dir_all(self.out).map_err(crate::error::io_at(self.out))?;
        let mut files = Vec::new();
        for out in o.units.iter() {
            let Some(u) = units.iter().find(|u| u.name() == out.name()) else {
                continue;
            };
            u.write_output(out, self, &o.units, &mut files)?;
        }
        o.outputs.extend(files);
        Ok(())
    }
}

/// The built-in analyses of the two-tower study, in the order they run (later ones read
/// earlier ones' outputs: the controls read the pairs, the word pieces the orientation).
pub fn builtin() -> Vec<Box<dyn Unit>> {
    vec![
        Box::new(pairs::Pairs),
        Box::new(runs::Runs),
        Box::new(pos::Pos),
        Box::new(controls::Controls),
        Box::new(predictability::Predictability),
        Box::new(split_scoring::SplitScoring),
        Box::new(orientation::BestOrientation),
        Box::new(table4::Table4),
        Box::new(score_figures::ScoreFigures),
        Box::new(pieces::Pieces),
        Box::new(word_groups::WordGroups),
        Box::new(emergence::EmergenceCurve),
    ]
}

/// `arithmetic` (eq. 4) or `geometric` (the released code).
pub fn kind_name(kind: ScoreKind) -> &'static str {
    match kind {
        ScoreKind::ArithmeticMean => "arithmetic",
        ScoreKind::GeometricMean => "geometric",
    }
}
