//! ELMo towers: a forward LSTM whose output at t has read `x_<t` and a backward LSTM whose
//! output at t has read `x_>t`; the tower output is their concatenation \[B, T, 2H\].
//!
//! The shift is applied to outputs (position t takes the forward state after x_{t-1} and the
//! backward state after x_{t+1}, zeros at the ends) instead of the released code's shifted
//! inputs with a PAD start token; both keep x_t out of position t.
//!
//! On CUDA in bf16 (switch [`crate::CudaKernel::LstmBf16`]) all towers' directions run as one
//! chained recurrence per layer ([`crate::layers::lstm::forward_chains`]: one batched GEMM per step,
//! backward LSTMs reading time reversed by index; [`forward_towers_chained`], through
//! [`crate::style::TowerStyle::forward_all`]); elsewhere each direction runs alone, the backward
//! one on time-reversed copies.

use candle_core::{Tensor, D};

use serde::{Deserialize, Serialize};

use super::{SharedConfig, Tower};
use crate::layers::lstm::{chains_on_cuda, forward_chains, reverse_time, Lstm};
use crate::layers::params::Init;
use crate::{Result, TowersError};

/// How an ELMo tower combines its directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElmoMode {
    /// Forward and backward LSTM outputs concatenated (the intended model).
    #[default]
    BiLstm,
    /// As the released code behaves: its `flip_seq` zeroes the backward output, so the tower is
    /// forward-only with a zero second half (we do not build the unused backward LSTM).
    AsReleased,
}

impl ElmoMode {
    /// The name the command lines use: `full` or `as-released`.
    pub fn as_str(self) -> &'static str {
        match self {
            ElmoMode::BiLstm => "full",
            ElmoMode::AsReleased => "as-released",
        }
    }
}

impl std::fmt::Display for ElmoMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ElmoMode {
    type Err = TowersError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "full" | "bilstm" => Ok(ElmoMode::BiLstm),
            "as-released" | "released" | "forward-only" => Ok(ElmoMode::AsReleased),
            _ => Err(TowersError::Config(format!(
                "unknown ELMo backward mode {s:?} (full, as-released)"
            ))),
        }
    }
}

/// The configuration of an ELMo tower (the released code's keys: `model_size` is
/// `hidden_size`, its `hidden_size` our `lstm_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElmoConfig {
    /// LSTM layers per direction.
    pub n_layers: usize,
    /// The per-direction output width H (the LSTMs' projection).
    pub hidden_size: usize,
    /// The LSTM cell width (the released `hidden_size`, 2048/4096).
    pub lstm_size: usize,
    /// Both directions, or the released code's forward-only towers.
    #[serde(default, alias = "elmo_mode")]
    pub mode: ElmoMode,
}

impl ElmoConfig {
    /// `n_layers` LSTM layers of cell `lstm_size`, projected to `hidden_size`, both directions.
    pub const fn new(n_layers: usize, hidden_size: usize, lstm_size: usize) -> Self {
        Self {
            n_layers,
            hidden_size,
            lstm_size,
            mode: ElmoMode::BiLstm,
        }
    }
}

/// One ELMo tower.
#[derive(Debug, Clone)]
pub struct ElmoTower {
    fwd: Lstm,
    bwd: Option<Lstm>,
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
    pub fn new(cfg: &ElmoConfig, shared: &SharedConfig, init: Init<'_>) -> Result<Self> {
        let h = cfg.hidden_size;
        let mk = |name: &str| {
            Lstm::new(
                h,
                cfg.lstm_size,
                h,
                cfg.n_layers,
                shared.init_std,
                init.pp(name),
            )
        };
        let bwd = match cfg.mode {
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
    /// or their per-step graph (`!fused`, the tests' reference); on CUDA in bf16, fused, the
    /// chained recurrence ([`ElmoTower::directions_chained`]).
    pub(crate) fn directions_with(
        &self,
        x: &Tensor,
        mask: &Tensor,
        fused: bool,
    ) -> Result<(Tensor, Tensor)> {
        if fused && chains_on_cuda(x) {
            return self.directions_chained(x, mask, fused);
        }
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

impl ElmoTower {
    /// [`ElmoTower::directions`] with the two LSTMs as one chained recurrence per layer
    /// ([`forward_chains`]; the backward LSTM reads x and the mask time reversed by index and
    /// writes its output in time order), `fused` as in [`ElmoTower::directions_with`].
    pub(crate) fn directions_chained(
        &self,
        x: &Tensor,
        mask: &Tensor,
        fused: bool,
    ) -> Result<(Tensor, Tensor)> {
        let mut dirs = towers_directions_chained(&[self], std::slice::from_ref(x), mask, fused)?;
        dirs.pop()
            .ok_or_else(|| TowersError::Config("directions_chained: no output".into()))
    }
}

/// The (forward, backward) directions of every tower of `towers` (tower k reading `xs[k]`, all
/// under `mask`) with all their LSTMs as one chained recurrence per layer: K towers × 2
/// directions (K chains forward-only) in one [`forward_chains`] a layer, at most 32 chains;
/// `fused` as in [`ElmoTower::directions_with`].
pub(crate) fn towers_directions_chained(
    towers: &[&ElmoTower],
    xs: &[Tensor],
    mask: &Tensor,
    fused: bool,
) -> Result<Vec<(Tensor, Tensor)>> {
    if xs.len() != towers.len() {
        return Err(TowersError::Config(format!(
            "{} tower inputs for {} towers",
            xs.len(),
            towers.len()
        )));
    }
    let (mut chains, mut inputs, mut slots) = (Vec::new(), Vec::new(), Vec::new());
    for (tower, x) in towers.iter().zip(xs) {
        // Tower k's forward chain and, where it has one, its backward chain after it.
        slots.push((chains.len(), tower.bwd.as_ref().map(|_| chains.len() + 1)));
        chains.push((&tower.fwd, false));
        inputs.push(x.clone());
        if let Some(bwd) = &tower.bwd {
            chains.push((bwd, true));
            inputs.push(x.clone());
        }
    }
    let outs = forward_chains(&chains, &inputs, mask, fused)?;
    slots
        .into_iter()
        .map(|(f, b)| {
            let f = shift_time(&outs[f], true)?;
            let b = match b {
                Some(b) => shift_time(&outs[b], false)?,
                None => f.zeros_like()?,
            };
            Ok((f, b))
        })
        .collect()
}

/// Every tower's output [B, T, 2H] (forward ++ backward) with all towers' chains of a layer as
/// one op ([`towers_directions_chained`], `fused` as there).
pub(crate) fn forward_towers_chained(
    towers: &[ElmoTower],
    xs: &[Tensor],
    mask: &Tensor,
    fused: bool,
) -> Result<Vec<Tensor>> {
    let elmo: Vec<&ElmoTower> = towers.iter().collect();
    towers_directions_chained(&elmo, xs, mask, fused)?
        .iter()
        .map(|(f, b)| Ok(Tensor::cat(&[f, b], D::Minus1)?))
        .collect()
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
    use crate::layers::params::ParamStore;
    use crate::style::{Preset, Style};
    use crate::test_util::assert_same_op;
    use crate::ModelConfig;
    use candle_core::{Device, Var};

    #[test]
    fn both_directions_match_the_per_step_graph_values_and_gradients() {
        let model = ModelConfig::preset(&Style::elmo(), Preset::Tiny).unwrap();
        let cfg: ElmoConfig = model.tower.get().unwrap();
        let store = ParamStore::new(&Device::Cpu, 5);
        let tower = ElmoTower::new(&cfg, &model.shared(), store.root().pp("tower")).unwrap();
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

    /// The two directions as one chained recurrence per layer (on the CPU: the chained op in f32,
    /// LstmSeq per chain) give the values and gradients of the directions run alone, in both
    /// modes; the forward-only mode leaves the backward half zero.
    #[test]
    fn chained_directions_match_the_directions_run_alone() {
        for mode in [ElmoMode::BiLstm, ElmoMode::AsReleased] {
            let model = ModelConfig::preset(&Style::elmo(), Preset::Tiny).unwrap();
            let mut cfg: ElmoConfig = model.tower.get().unwrap();
            cfg.mode = mode;
            let store = ParamStore::new(&Device::Cpu, 6);
            let tower = ElmoTower::new(&cfg, &model.shared(), store.root().pp("tower")).unwrap();
            let (b, t, h) = (3, 9, cfg.hidden_size);
            let dev = Device::Cpu;
            let xs: Vec<f32> = (0..b * t * h)
                .map(|i| (i as f32 * 0.53).cos() * 1.2)
                .collect();
            let x = Var::from_tensor(&Tensor::from_vec(xs, (b, t, h), &dev).unwrap()).unwrap();
            let mut m = vec![1f32; b * t];
            (m[0], m[t + 3], m[3 * t - 1]) = (0.0, 0.0, 0.0);
            let mask = Tensor::from_vec(m, (b, t, 1), &dev).unwrap();
            let cat = |(f, r): (Tensor, Tensor)| Tensor::cat(&[&f, &r], D::Minus1).unwrap();
            let chained = cat(tower
                .directions_chained(x.as_tensor(), &mask, true)
                .unwrap());
            let alone = cat(tower.directions_with(x.as_tensor(), &mask, true).unwrap());
            let w: Vec<f32> = (0..b * t * 2 * h)
                .map(|i| (i as f32 * 0.29).sin())
                .collect();
            let w = Tensor::from_vec(w, (b, t, 2 * h), &dev).unwrap();
            let params = store.params();
            let mut vars: Vec<&Var> = params.iter().map(|p| &p.var).collect();
            vars.push(&x);
            assert_same_op(&chained, &alone, &w, &vars, 2e-5);
            if mode == ElmoMode::AsReleased {
                let back = chained.narrow(2, h, h).unwrap();
                assert_eq!(crate::test_util::max_abs(&back), 0.0);
            }
        }
    }

    /// All ELMo towers' layers as one chained op (the route CUDA in bf16 takes, forced here on the
    /// CPU's f32 op) give the K towers' outputs and every variable's gradient of each tower's
    /// own chained op bit for bit (the CPU op runs LstmSeq per chain), and those of the towers
    /// run one by one (each direction alone) within 2e-5, in both modes.
    #[test]
    fn all_towers_chained_match_the_towers_run_one_by_one() {
        for mode in [ElmoMode::BiLstm, ElmoMode::AsReleased] {
            let model = ModelConfig::preset(&Style::elmo(), Preset::Tiny).unwrap();
            let mut cfg: ElmoConfig = model.tower.get().unwrap();
            cfg.mode = mode;
            let store = ParamStore::new(&Device::Cpu, 7);
            let towers: Vec<ElmoTower> = (0..3)
                .map(|k| {
                    ElmoTower::new(&cfg, &model.shared(), store.root().pp(format!("tower{k}")))
                })
                .collect::<Result<_>>()
                .unwrap();
            let (b, t, h) = (3, 8, cfg.hidden_size);
            let dev = Device::Cpu;
            let xs: Vec<Var> = (0..3)
                .map(|k| {
                    let v: Vec<f32> = (0..b * t * h)
                        .map(|i| ((i + 97 * k) as f32 * 0.43).sin())
                        .collect();
                    Var::from_tensor(&Tensor::from_vec(v, (b, t, h), &dev).unwrap()).unwrap()
                })
                .collect();
            let x: Vec<Tensor> = xs.iter().map(|v| v.as_tensor().clone()).collect();
            let mut m = vec![1f32; b * t];
            (m[0], m[t + 3], m[3 * t - 1]) = (0.0, 0.0, 0.0);
            let mask = Tensor::from_vec(m, (b, t, 1), &dev).unwrap();
            let cat = |ys: Vec<Tensor>| Tensor::cat(&ys, D::Minus1).unwrap();
            let all = cat(forward_towers_chained(&towers, &x, &mask, true).unwrap());
            let each = cat(towers
                .iter()
                .zip(&x)
                .map(|(tw, x)| {
                    let (f, r) = tw.directions_chained(x, &mask, true)?;
                    Ok(Tensor::cat(&[&f, &r], D::Minus1)?)
                })
                .collect::<Result<Vec<_>>>()
                .unwrap());
            let alone = cat(towers
                .iter()
                .zip(&x)
                .map(|(tw, x)| Tower::forward(tw, x, &mask))
                .collect::<Result<Vec<_>>>()
                .unwrap());
            let n = all.elem_count();
            let w: Vec<f32> = (0..n).map(|i| (i as f32 * 0.31).sin()).collect();
            let w = Tensor::from_vec(w, all.dims(), &dev).unwrap();
            let params = store.params();
            let mut vars: Vec<&Var> = params.iter().map(|p| &p.var).collect();
            assert!(vars.len() > 10, "{}", vars.len());
            vars.extend(xs.iter());
            assert_same_op(&all, &each, &w, &vars, 0.0);
            assert_same_op(&all, &alone, &w, &vars, 2e-5);
        }
    }
}
