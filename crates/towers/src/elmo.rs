//! ELMo towers: a forward LSTM whose output at t has read `x_<t` and a backward LSTM whose
//! output at t has read `x_>t`; the tower output is their concatenation \[B, T, 2H\].
//!
//! The shift is applied to outputs (position t takes the forward state after x_{t-1} and the
//! backward state after x_{t+1}, zeros at the ends) instead of the released code's shifted
//! inputs with a PAD start token; both keep x_t out of position t.

use candle_core::{Tensor, D};

use crate::config::{ElmoMode, ModelConfig};
use crate::lstm::Lstm;
use crate::params::Init;
use crate::style::Tower;
use crate::Result;

/// One ELMo tower.
#[derive(Debug, Clone)]
pub struct ElmoTower {
    fwd: Lstm,
    bwd: Option<Lstm>,
}

/// Reverses a [B, T, ...] tensor along time.
fn reverse_time(x: &Tensor) -> Result<Tensor> {
    let t = x.dim(1)?;
    let idx: Vec<u32> = (0..t as u32).rev().collect();
    let idx = Tensor::from_vec(idx, t, x.device())?;
    Ok(x.index_select(&idx, 1)?)
}

/// out[:, t] = x[:, t - 1] (zeros at t = 0) when `right`, else out[:, t] = x[:, t + 1].
fn shift_time(x: &Tensor, right: bool) -> Result<Tensor> {
    let (b, t, d) = x.dims3()?;
    let z = Tensor::zeros((b, 1, d), x.dtype(), x.device())?;
    if t == 1 {
        return Ok(z);
    }
    Ok(if right {
        Tensor::cat(&[&z, &x.narrow(1, 0, t - 1)?], 1)?
    } else {
        Tensor::cat(&[&x.narrow(1, 1, t - 1)?, &z], 1)?
    })
}

impl ElmoTower {
    /// `fwd.*` and (BiLstm only) `bwd.*` LSTMs of cell `lstm_size`, projected to H.
    pub fn new(cfg: &ModelConfig, init: Init<'_>) -> Result<Self> {
        let h = cfg.hidden_size;
        let mk = |name: &str| {
            Lstm::new(
                h,
                cfg.lstm_size,
                h,
                cfg.n_layers,
                cfg.init_std,
                init.pp(name),
            )
        };
        let bwd = match cfg.elmo_mode {
            ElmoMode::BiLstm => Some(mk("bwd")?),
            ElmoMode::AsReleased => None,
        };
        Ok(Self {
            fwd: mk("fwd")?,
            bwd,
        })
    }

    /// The two directions separately, already shifted: (forward \[B,T,H\] from x_<t, backward
    /// \[B,T,H\] from x_>t; zeros in `AsReleased` mode).
    pub fn directions(&self, x: &Tensor, mask: &Tensor) -> Result<(Tensor, Tensor)> {
        self.directions_with(x, mask, true)
    }

    /// [`ElmoTower::directions`], with the LSTMs' whole-sequence op where it applies (`fused`)
    /// or their per-step graph (`!fused`, the tests' reference).
    pub(crate) fn directions_with(
        &self,
        x: &Tensor,
        mask: &Tensor,
        fused: bool,
    ) -> Result<(Tensor, Tensor)> {
        let f = shift_time(&self.fwd.forward(x, mask, fused)?, true)?;
        let b = match &self.bwd {
            Some(bwd) => {
                let rb = bwd.forward(&reverse_time(x)?, &reverse_time(mask)?, fused)?;
                shift_time(&reverse_time(&rb)?, false)?
            }
            None => f.zeros_like()?,
        };
        Ok((f, b))
    }
}

impl Tower for ElmoTower {
    /// Tower output [B, T, 2H] = forward ++ backward.
    fn forward(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (f, b) = ElmoTower::directions(self, x, mask)?;
        Ok(Tensor::cat(&[&f, &b], D::Minus1)?)
    }

    fn directions(&self, x: &Tensor, mask: &Tensor) -> Option<Result<(Tensor, Tensor)>> {
        Some(ElmoTower::directions(self, x, mask))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Preset, Style};
    use crate::params::ParamStore;
    use crate::test_util::assert_same_op;
    use candle_core::{Device, Var};

    #[test]
    fn both_directions_match_the_per_step_graph_values_and_gradients() {
        let cfg = ModelConfig::preset(Style::Elmo, Preset::Tiny).unwrap();
        let store = ParamStore::new(&Device::Cpu, 5);
        let tower = ElmoTower::new(&cfg, store.root().pp("tower")).unwrap();
        let (b, t, h) = (3, 10, cfg.hidden_size);
        let dev = Device::Cpu;
        let xs: Vec<f32> = (0..b * t * h)
            .map(|i| (i as f32 * 0.71).sin() * 1.5)
            .collect();
        let x = Var::from_tensor(&Tensor::from_vec(xs, (b, t, h), &dev).unwrap()).unwrap();
        // PAD first in sequence 0, in the middle of sequence 1, at the end of sequence 2.
        let mut m = vec![1f32; b * t];
        (m[0], m[t + 4], m[3 * t - 1]) = (0.0, 0.0, 0.0);
        let mask = Tensor::from_vec(m, (b, t, 1), &dev).unwrap();
        let both = |fused: bool| {
            let (f, r) = tower.directions_with(x.as_tensor(), &mask, fused).unwrap();
            Tensor::cat(&[&f, &r], D::Minus1).unwrap()
        };
        let w: Vec<f32> = (0..b * t * 2 * h)
            .map(|i| (i as f32 * 0.37).cos())
            .collect();
        let w = Tensor::from_vec(w, (b, t, 2 * h), &dev).unwrap();
        let params = store.params();
        let mut vars: Vec<&Var> = params.iter().map(|p| &p.var).collect();
        vars.push(&x);
        assert_same_op(&both(true), &both(false), &w, &vars, 2e-5);
    }
}
