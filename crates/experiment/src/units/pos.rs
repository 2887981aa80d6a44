//! Fig. 4: the main score's summaries per UPOS tag over the [`super::TOP_TOKENS`] most frequent
//! tokens, per run (`pos_<label>`, `fig4_pos_<label>.png`) and tag by tag across runs beside the
//! paper's directions (`pos_by_run`, `fig4_pos_by_run.png`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Analysis, Input, Outputs, StudyContext, TOP_TOKENS};
use crate::error::Result;
use crate::pos::{lexicon, pos_tags, TagSource};
use crate::pos_by_run::{write_pos_by_run, RunTags};
use crate::tables::write_pos;

/// The part-of-speech unit (`pos` in `study.json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Pos;

/// Fig. 4 per run, in run order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PosByRun(pub Vec<RunTags>);

impl Analysis for Pos {
    type Output = PosByRun;

    fn name(&self) -> &str {
        "pos"
    }

    fn needs(&self) -> &[Input] {
        &[Input::Vocabulary, Input::Corpus]
    }

    fn compute(&self, ctx: &StudyContext<'_>, _: &Outputs) -> Result<Option<PosByRun>> {
        let Some((_, rs)) = ctx.main() else {
            return Ok(None);
        };
        let data = ctx.data(self.name())?;
        let tags = resolve_tags(&ctx.spec.tags, ctx.out);
        let dense = lexicon(data, &tags, ctx.progress)?.to_dense(data.padded_vocab());
        let top = ctx.top(self.name())?;
        let runs = (rs.iter())
            .map(|s| {
                Ok(RunTags {
                    label: s.label.clone(),
                    tags: pos_tags(s, top, &dense, &ctx.copts.bootstrap)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Some(PosByRun(runs)))
    }

    fn write(
        &self,
        o: &PosByRun,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let Some((_, rs)) = ctx.main() else {
            return Ok(());
        };
        for (s, tags) in rs.iter().zip(&o.0) {
            let title = format!(
                "Preference score per UPOS tag, {} ({})",
                s.label,
                ctx.spec.tags.describe()
            );
            files.extend(write_pos(s, &tags.tags, &title, ctx.out)?);
        }
        // Fig. 4 tag by tag across runs, beside the paper's directions.
        if o.0.len() > 1 {
            let title = format!(
                "Preference score per UPOS class across runs, top {TOP_TOKENS} tokens ({})",
                ctx.spec.tags.describe()
            );
            files.extend(write_pos_by_run(&o.0, &title, ctx.out)?);
        }
        Ok(())
    }
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
