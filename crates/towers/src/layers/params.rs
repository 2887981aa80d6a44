//! Named trainable variables with seeded initialisation (candle's CPU RNG cannot be seeded, so
//! every initial value is drawn on the host from a `ChaCha8Rng`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use crate::{Result, TowersError};

/// Writes `tensors` as a safetensors file at `path` with the mode a plain `File::create` gets
/// (0666 less the umask): safetensors' own writer goes through a 0600 temporary file, which a
/// collaborator's group could not read on a shared cluster. The callers write into temporary
/// folders renamed into place, so the file itself needs no atomic rename.
pub(crate) fn write_safetensors(tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    let bytes = safetensors::serialize(tensors, None)
        .map_err(|e| TowersError::Config(format!("{}: {e}", path.display())))?;
    std::fs::write(path, bytes).map_err(crate::error::io_err(path))
}

/// One trainable variable.
#[derive(Debug, Clone)]
pub struct Param {
    /// Dotted name, mirroring the module tree (`tower0.layer1.attn.qkv.weight`).
    pub name: String,
    /// The f32 master value.
    pub var: Var,
    /// Whether weight decay applies (not to biases, LayerNorm parameters).
    pub decay: bool,
}

/// An ordered set of named variables, filled while a model is built.
#[derive(Debug)]
pub struct ParamStore {
    device: Device,
    params: RefCell<Vec<Param>>,
    rng: RefCell<ChaCha8Rng>,
}

impl ParamStore {
    /// An empty store whose initial values are drawn from `seed`.
    pub fn new(device: &Device, seed: u64) -> Self {
        Self {
            device: device.clone(),
            params: RefCell::new(Vec::new()),
            rng: RefCell::new(ChaCha8Rng::seed_from_u64(seed)),
        }
    }

    /// The device the variables live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A builder rooted at `prefix`.
    pub fn root(&self) -> Init<'_> {
        Init {
            store: self,
            prefix: String::new(),
        }
    }

    /// All variables in creation order.
    pub fn params(&self) -> Vec<Param> {
        self.params.borrow().clone()
    }

    /// Total number of scalars.
    pub fn n_scalars(&self) -> usize {
        self.params
            .borrow()
            .iter()
            .map(|p| p.var.elem_count())
            .sum()
    }

    /// Name -> current value (copies), e.g. to compare weights.
    pub fn snapshot(&self) -> Result<HashMap<String, Tensor>> {
        let mut m = HashMap::new();
        for p in self.params.borrow().iter() {
            m.insert(p.name.clone(), p.var.as_tensor().copy()?);
        }
        Ok(m)
    }

    /// Writes every variable to a safetensors file (not atomic by itself; see `checkpoint`).
    pub fn save(&self, path: &Path) -> Result<()> {
        write_safetensors(&self.snapshot()?, path)?;
        Ok(())
    }

    /// Sets every variable from a name -> tensor map; all names and shapes must match.
    pub fn load_map(&self, map: &HashMap<String, Tensor>, origin: &str) -> Result<()> {
        let err = |msg: String| TowersError::Checkpoint {
            path: origin.to_string(),
            msg,
        };
        let params = self.params.borrow();
        if map.len() != params.len() {
            return Err(err(format!(
                "{} tensors stored, the model has {}",
                map.len(),
                params.len()
            )));
        }
        for p in params.iter() {
            let t = map
                .get(&p.name)
                .ok_or_else(|| err(format!("missing tensor {}", p.name)))?;
            if t.dims() != p.var.dims() {
                return Err(err(format!(
                    "{}: stored shape {:?}, model {:?}",
                    p.name,
                    t.dims(),
                    p.var.dims()
                )));
            }
            p.var
                .set(&t.to_dtype(DType::F32)?.to_device(&self.device)?)?;
        }
        Ok(())
    }

    /// Loads a safetensors file written by [`ParamStore::save`].
    pub fn load(&self, path: &Path) -> Result<()> {
        let map = candle_core::safetensors::load(path, &self.device).map_err(|e| {
            TowersError::Checkpoint {
                path: path.display().to_string(),
                msg: e.to_string(),
            }
        })?;
        self.load_map(&map, &path.display().to_string())
    }

    fn push(&self, name: String, data: Vec<f32>, shape: &[usize], decay: bool) -> Result<Tensor> {
        if self.params.borrow().iter().any(|p| p.name == name) {
            return Err(TowersError::Config(format!("duplicate parameter {name}")));
        }
        let var = Var::from_tensor(&Tensor::from_vec(data, shape, &self.device)?)?;
        let t = var.as_tensor().clone();
        self.params.borrow_mut().push(Param { name, var, decay });
        Ok(t)
    }
}

/// A handle that creates variables under a name prefix (like candle's `VarBuilder::pp`).
#[derive(Debug, Clone)]
pub struct Init<'a> {
    store: &'a ParamStore,
    prefix: String,
}

impl<'a> Init<'a> {
    /// A child builder under `prefix.name`.
    pub fn pp(&self, name: impl std::fmt::Display) -> Init<'a> {
        let prefix = if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        };
        Init {
            store: self.store,
            prefix,
        }
    }

    fn full(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// A decayed variable drawn from N(0, std²).
    pub fn normal(&self, name: &str, shape: &[usize], std: f64) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let dist = Normal::new(0.0f32, std as f32)
            .map_err(|e| TowersError::Config(format!("init std {std}: {e}")))?;
        let mut rng = self.store.rng.borrow_mut();
        let data: Vec<f32> = (0..n).map(|_| dist.sample(&mut *rng)).collect();
        drop(rng);
        self.store.push(self.full(name), data, shape, true)
    }

    /// A decayed variable drawn from U(-a, a).
    pub fn uniform(&self, name: &str, shape: &[usize], a: f64) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let mut rng = self.store.rng.borrow_mut();
        let a = a as f32;
        let data: Vec<f32> = (0..n).map(|_| rng.random_range(-a..a)).collect();
        drop(rng);
        self.store.push(self.full(name), data, shape, true)
    }

    /// A non-decayed variable filled with `value` (biases, LayerNorm gain/shift).
    pub fn constant(&self, name: &str, shape: &[usize], value: f32) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        self.store
            .push(self.full(name), vec![value; n], shape, false)
    }

    /// A non-decayed uniform variable (LSTM biases, as PyTorch initialises them).
    pub fn uniform_no_decay(&self, name: &str, shape: &[usize], a: f64) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let mut rng = self.store.rng.borrow_mut();
        let a = a as f32;
        let data: Vec<f32> = (0..n).map(|_| rng.random_range(-a..a)).collect();
        drop(rng);
        self.store.push(self.full(name), data, shape, false)
    }
}
