//! The word-piece control (`pieces_runs`, `pieces_pairs`, and `pieces_orientation` under the
//! study's orientation): the scores within word-initial and continuation pieces (first score
//! kind; WordPiece vocabularies only).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Analysis, Input, Outputs, StudyContext, TOP_TOKENS};
use crate::error::Result;
use crate::orientation::{oriented_cells_table, Orientation, OrientedCells};
use crate::pieces::{piece_classes, piece_control, piece_tables, PieceControl};

/// The word-piece unit (`pieces` in `study.json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Pieces;

/// The control, and its pairs under the orientation when the study found one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WordPieces {
    /// Per run and pair, within each piece class.
    pub control: PieceControl,
    /// The pairs under the [`Orientation`] unit's signs.
    pub oriented: Option<Vec<OrientedCells>>,
}

impl Analysis for Pieces {
    type Output = WordPieces;

    fn name(&self) -> &str {
        "pieces"
    }

    fn needs(&self) -> &[Input] {
        &[Input::Vocabulary, Input::Corpus]
    }

    fn compute(&self, ctx: &StudyContext<'_>, earlier: &Outputs) -> Result<Option<WordPieces>> {
        let Some((_, rs)) = ctx.main() else {
            return Ok(None);
        };
        let data = ctx.data(self.name())?;
        let classes = piece_classes(&data.tok, data.padded_vocab())?;
        let Some(control) = piece_control(rs, ctx.top(self.name())?, &classes)? else {
            return Ok(None);
        };
        let oriented = match earlier.get::<Orientation>() {
            Some(o) => Some(control.oriented(o)?),
            None => None,
        };
        Ok(Some(WordPieces { control, oriented }))
    }

    fn write(
        &self,
        o: &WordPieces,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let (t, p) = piece_tables(&o.control.runs, &o.control.pairs, TOP_TOKENS);
        ctx.table(&t, ctx.out, "pieces_runs", files)?;
        ctx.table(&p, ctx.out, "pieces_pairs", files)?;
        if let Some(rows) = &o.oriented {
            let t = oriented_cells_table(rows, TOP_TOKENS);
            ctx.table(&t, ctx.out, "pieces_orientation", files)?;
        }
        Ok(())
    }
}
