//! The layer curve: every probe at every layer of one model (trained on train, chosen on dev,
//! scored on test), with the right-branching baseline, as a table and a figure.

use std::path::{Path, PathBuf};

use candle_core::Device;
use report::{Cell, IntervalGroup, IntervalPoint, PlotOptions, Progress, Table};
use serde::{Deserialize, Serialize};

use crate::error::{ProbeError, Result};
use crate::fit::{select, ProbeSet, Scores};
use crate::metrics::{
    right_branching_uuas, Bootstrap, DepthScores, DistanceScores, Estimate, UposScores,
};
use crate::params::{ProbeParams, ProbeTask};
use crate::states::LayerStates;
use crate::tree::GoldTree;

/// One split: the gold trees and the states of the same sentences.
#[derive(Debug, Clone, Copy)]
pub struct Split<'a> {
    /// Gold trees.
    pub gold: &'a [GoldTree],
    /// States of every layer.
    pub states: &'a LayerStates,
}

/// What the layer curve trains: candidate settings per probe (the dev loss chooses among
/// them), the bootstrap, and the layers (all when `None`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveSettings {
    /// Candidates of the distance probe.
    pub distance: Vec<ProbeParams>,
    /// Candidates of the depth probe.
    pub depth: Vec<ProbeParams>,
    /// Candidates of the UPOS probe.
    pub upos: Vec<ProbeParams>,
    /// Intervals over test sentences.
    pub bootstrap: Bootstrap,
    /// Layers to probe; `None`: all.
    pub layers: Option<Vec<usize>>,
}

impl Default for CurveSettings {
    /// One default candidate per probe, all layers, the default bootstrap.
    fn default() -> Self {
        Self {
            distance: vec![ProbeParams::distance()],
            depth: vec![ProbeParams::depth()],
            upos: vec![ProbeParams::upos()],
            bootstrap: Bootstrap::default(),
            layers: None,
        }
    }
}

/// The test scores of the three probes at one layer, with the settings the dev split chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerRow {
    /// Layer index (0: the input embeddings).
    pub layer: usize,
    /// Distance probe: UUAS, DSpr.
    pub distance: DistanceScores,
    /// Depth probe: root accuracy, NSpr.
    pub depth: DepthScores,
    /// UPOS probe: accuracy.
    pub upos: UposScores,
    /// The chosen settings (distance, depth, UPOS).
    pub chosen: Vec<ProbeParams>,
    /// Epochs run by each chosen probe (distance, depth, UPOS).
    pub epochs_run: Vec<usize>,
}

/// Every layer's row and the right-branching baseline's UUAS on the test split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerCurve {
    /// The model probed.
    pub model: String,
    /// One row per probed layer.
    pub rows: Vec<LayerRow>,
    /// UUAS of attaching each non-punctuation word to the next one.
    pub right_branching: Estimate,
    /// Sentences of train, dev and test.
    pub sentences: [usize; 3],
}

/// Trains and scores the three probes at every layer.
pub fn layer_curve(
    model: &str,
    train: Split,
    dev: Split,
    test: Split,
    settings: &CurveSettings,
    device: &Device,
    progress: &Progress,
) -> Result<LayerCurve> {
    settings.bootstrap.check()?;
    let n_layers = train.states.n_layers();
    if dev.states.n_layers() != n_layers || test.states.n_layers() != n_layers {
        return Err(ProbeError::Mismatch(
            "the splits have different layers".into(),
        ));
    }
    let layers = settings
        .layers
        .clone()
        .unwrap_or_else(|| (0..n_layers).collect());
    let tasks = [
        (&settings.distance, "distance"),
        (&settings.depth, "depth"),
        (&settings.upos, "upos"),
    ];
    for (c, what) in tasks {
        let want = |t: ProbeTask| match what {
            "distance" => matches!(t, ProbeTask::Distance(_)),
            "depth" => t == ProbeTask::Depth,
            _ => t == ProbeTask::Upos,
        };
        if c.is_empty() || c.iter().any(|p| !want(p.task)) {
            return Err(ProbeError::InvalidParams(format!(
                "the {what} candidates must be at least one {what} probe"
            )));
        }
    }
    let mut rows = Vec::with_capacity(layers.len());
    for &l in &layers {
        let tr = ProbeSet::new(train.gold, train.states, l)?;
        let dv = ProbeSet::new(dev.gold, dev.states, l)?;
        let te = ProbeSet::new(test.gold, test.states, l)?;
        let mut chosen = Vec::new();
        let mut epochs_run = Vec::new();
        let mut scores = Vec::new();
        for (candidates, what) in tasks {
            let t0 = std::time::Instant::now();
            let sel = select(candidates, &tr, &dv, device, progress)?;
            let s = sel.probe.evaluate(&te, &settings.bootstrap)?;
            progress.say(|| {
                format!(
                    "layer {l} {what}: {} ({} epochs, {:.1} s)",
                    describe(&s),
                    sel.probe.history.len(),
                    t0.elapsed().as_secs_f64()
                )
            });
            chosen.push(sel.probe.params);
            epochs_run.push(sel.probe.history.len());
            scores.push(s);
        }
        let (Scores::Distance(distance), Scores::Depth(depth), Scores::Upos(upos)) =
            (scores[0], scores[1], scores[2])
        else {
            return Err(ProbeError::Mismatch(
                "probe scores of the wrong kind".into(),
            ));
        };
        rows.push(LayerRow {
            layer: l,
            distance,
            depth,
            upos,
            chosen,
            epochs_run,
        });
    }
    Ok(LayerCurve {
        model: model.to_string(),
        rows,
        right_branching: right_branching_uuas(test.gold, &settings.bootstrap)?,
        sentences: [train.gold.len(), dev.gold.len(), test.gold.len()],
    })
}

fn describe(s: &Scores) -> String {
    let e = |x: &Estimate| format!("{:.3} [{:.3}, {:.3}]", x.value, x.low, x.high);
    let o = |x: &Option<Estimate>| x.as_ref().map_or("-".to_string(), e);
    match s {
        Scores::Distance(d) => format!("UUAS {} DSpr. {}", e(&d.uuas), o(&d.dspr)),
        Scores::Depth(d) => format!("root acc. {} NSpr. {}", e(&d.root_accuracy), o(&d.nspr)),
        Scores::Upos(u) => format!("UPOS acc. {}", e(&u.accuracy)),
    }
}

fn cells(e: Option<&Estimate>) -> [Cell; 3] {
    match e {
        Some(e) => [Cell::Num(e.value), Cell::Num(e.low), Cell::Num(e.high)],
        None => [Cell::Empty, Cell::Empty, Cell::Empty],
    }
}

impl LayerCurve {
    /// The table: one row per layer (UUAS, DSpr., root accuracy, NSpr., UPOS accuracy, each
    /// with its interval), then the right-branching baseline's UUAS.
    pub fn table(&self) -> Table {
        let mut header = vec!["layer".to_string()];
        for m in ["UUAS", "DSpr.", "root acc.", "NSpr.", "UPOS acc."] {
            header.push(m.to_string());
            header.push(format!("{m} low"));
            header.push(format!("{m} high"));
        }
        let mut t = Table::new(header)
            .with_title(format!("Probes of {} by layer (test split)", self.model))
            .with_note(format!(
                "Trained on {} train sentences, chosen on {} dev, scored on {} test; 95 % \
                 bootstrap intervals over test sentences. Layer 0: the input embeddings.",
                self.sentences[0], self.sentences[1], self.sentences[2]
            ))
            .with_precision(3);
        for r in &self.rows {
            let mut row = vec![Cell::Text(r.layer.to_string())];
            row.extend(cells(Some(&r.distance.uuas)));
            row.extend(cells(r.distance.dspr.as_ref()));
            row.extend(cells(Some(&r.depth.root_accuracy)));
            row.extend(cells(r.depth.nspr.as_ref()));
            row.extend(cells(Some(&r.upos.accuracy)));
            t.push_row(row);
        }
        let mut row = vec![Cell::Text("right-branching".into())];
        row.extend(cells(Some(&self.right_branching)));
        row.extend((0..12).map(|_| Cell::Empty));
        t.push_row(row);
        t
    }

    /// Writes `probe_layers.{csv,md,json}` and the figure `probe_layers.png` (UUAS, DSpr. and
    /// UPOS accuracy per layer with their intervals; the right-branching UUAS as a line) into
    /// `dir`; returns the paths.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).map_err(|source| ProbeError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut paths = self.table().write_all(dir, "probe_layers")?;
        let positions: Vec<String> = self.rows.iter().map(|r| r.layer.to_string()).collect();
        let point = |at: usize, e: &Estimate| IntervalPoint {
            at,
            y: e.value,
            interval: Some((e.low, e.high)),
        };
        let group =
            |name: &str, pts: Vec<IntervalPoint>, colour: usize, hollow: bool| IntervalGroup {
                name: name.to_string(),
                points: pts,
                colour: Some(colour),
                hollow,
            };
        let rows = &self.rows;
        let groups = vec![
            group(
                "UUAS",
                rows.iter()
                    .enumerate()
                    .map(|(i, r)| point(i, &r.distance.uuas))
                    .collect(),
                0,
                false,
            ),
            group(
                "DSpr.",
                rows.iter()
                    .enumerate()
                    .filter_map(|(i, r)| r.distance.dspr.as_ref().map(|e| point(i, e)))
                    .collect(),
                1,
                false,
            ),
            group(
                "UPOS acc.",
                rows.iter()
                    .enumerate()
                    .map(|(i, r)| point(i, &r.upos.accuracy))
                    .collect(),
                2,
                false,
            ),
            group(
                "right-branching UUAS",
                (0..rows.len())
                    .map(|i| point(i, &self.right_branching))
                    .collect(),
                0,
                true,
            ),
        ];
        let fig = dir.join("probe_layers.png");
        report::interval_plot(
            &fig,
            &positions,
            &groups,
            &PlotOptions {
                title: format!("Probes of {} by layer", self.model),
                x_label: "layer (0 = input embeddings)".into(),
                y_label: "test score (95 % interval)".into(),
                ..Default::default()
            },
        )?;
        paths.push(fig);
        Ok(paths)
    }
}
