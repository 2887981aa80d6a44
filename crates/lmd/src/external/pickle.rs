//! A pickle reader for what `torch.save` writes, and nothing more. It interprets the opcodes
//! that build plain data (dicts, lists, tuples, strings, numbers) and knows a fixed list of
//! globals: the tensor rebuild functions, the storage types, `OrderedDict`, `defaultdict`,
//! `dict` and `list`. Any other global (`os.system`, `builtins.eval`, ...) is refused when its
//! opcode is read, so nothing it names is ever looked up or called; opcodes outside this set
//! are refused too. Values are shared, immutable trees whose depth and total work are bounded,
//! so arbitrary bytes end in an error, never a panic, a deep recursion or a blow-up.

use std::collections::HashMap;
use std::rc::Rc;

/// Deepest nesting of containers accepted.
const MAX_DEPTH: u32 = 64;
/// Most container elements copied (copy-on-write) while reading one pickle.
const MAX_WORK: usize = 1 << 24;
/// Most values on the stack, and most open marks (a `torch.save` pickle needs a handful).
const MAX_STACK: usize = 1 << 16;

/// The globals a `torch.save` pickle may name.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Global {
    /// `torch._utils._rebuild_tensor_v2` (or `_rebuild_tensor`).
    RebuildTensor,
    /// `torch._utils._rebuild_parameter`.
    RebuildParameter,
    /// `torch.<Type>Storage`: the storage's element type (`Float`, `Half`, `Long`, ...).
    Storage(String),
    /// `collections.OrderedDict`, `collections.defaultdict`, `dict`: called, an empty dict.
    DictLike,
    /// `list` (a defaultdict's factory): called, an empty list.
    ListLike,
}

/// Why a pickle was not read.
#[derive(Debug)]
pub(crate) enum PickleError {
    /// A global outside [`Global`]: `module.name`.
    Forbidden(String),
    /// Anything else, with the byte offset.
    Malformed(String),
}

/// A tensor as `_rebuild_tensor_v2` describes it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TensorRef {
    /// Storage element type (`Float`, `Double`, `Half`, `BFloat16`, `Long`, ...).
    pub storage_type: String,
    /// The storage's key: its member `<archive>/data/<key>`.
    pub key: String,
    /// Elements the storage holds.
    pub numel: u64,
    /// Offset (elements) of the tensor in its storage.
    pub offset: u64,
    pub size: Vec<u64>,
    pub stride: Vec<u64>,
}

/// A value on the pickle stack.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    None,
    Bool,
    Int(i64),
    Float,
    Str(Rc<str>),
    Bytes,
    Tuple(Rc<Vec<Value>>, u32),
    List(Rc<Vec<Value>>, u32),
    Dict(Rc<Vec<(Value, Value)>>, u32),
    Global(Global),
    Storage {
        storage_type: String,
        key: String,
        numel: u64,
    },
    Tensor(Rc<TensorRef>),
}

impl Value {
    fn depth(&self) -> u32 {
        match self {
            Value::Tuple(_, d) | Value::List(_, d) | Value::Dict(_, d) => *d,
            _ => 0,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(i) if *i >= 0 => Some(*i as u64),
            _ => None,
        }
    }
}

fn global(module: &str, name: &str) -> Result<Global, PickleError> {
    Ok(match (module, name) {
        ("torch._utils", "_rebuild_tensor_v2" | "_rebuild_tensor") => Global::RebuildTensor,
        ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
        ("torch", s) if s.ends_with("Storage") && s.len() > 7 && s.is_ascii() => {
            Global::Storage(s[..s.len() - 7].to_string())
        }
        ("collections", "OrderedDict" | "defaultdict") | ("__builtin__" | "builtins", "dict") => {
            Global::DictLike
        }
        ("__builtin__" | "builtins", "list") => Global::ListLike,
        _ => return Err(PickleError::Forbidden(format!("{module}.{name}"))),
    })
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u64, Value>,
    work: usize,
}

/// Reads a pickle; the value it returns at `STOP`.
pub(crate) fn load(data: &[u8]) -> Result<Value, PickleError> {
    let mut m = Machine {
        data,
        pos: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        work: 0,
    };
    m.run()
}

impl Machine<'_> {
    fn bad<T>(&self, what: impl std::fmt::Display) -> Result<T, PickleError> {
        Err(PickleError::Malformed(format!(
            "pickle byte {}: {what}",
            self.pos
        )))
    }

    fn take(&mut self, n: u64) -> Result<&[u8], PickleError> {
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return self.bad(format!("{n} bytes announced, {left} left"));
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, PickleError> {
        let b = self.take(n as u64)?;
        Ok(b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | x as u64))
    }

    fn line(&mut self) -> Result<String, PickleError> {
        let rest = &self.data[self.pos..];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return self.bad("unterminated line");
        };
        let s = String::from_utf8_lossy(&rest[..end]).into_owned();
        self.pos += end + 1;
        Ok(s)
    }

    fn pop(&mut self) -> Result<Value, PickleError> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return self.bad("pop past a mark");
        }
        match self.stack.pop() {
            Some(v) => Ok(v),
            None => self.bad("empty stack"),
        }
    }

    fn top(&mut self) -> Result<&mut Value, PickleError> {
        if self.stack.is_empty() || self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return self.bad("empty stack");
        }
        let k = self.stack.len() - 1;
        Ok(&mut self.stack[k])
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>, PickleError> {
        let Some(m) = self.marks.pop() else {
            return self.bad("no mark");
        };
        Ok(self.stack.split_off(m.min(self.stack.len())))
    }

    fn push(&mut self, v: Value) -> Result<(), PickleError> {
        if v.depth() > MAX_DEPTH {
            return self.bad(format!("nesting deeper than {MAX_DEPTH}"));
        }
        if self.stack.len() >= MAX_STACK {
            return self.bad(format!("more than {MAX_STACK} values on the stack"));
        }
        self.stack.push(v);
        Ok(())
    }

    fn container_depth(items: &[Value]) -> u32 {
        1 + items.iter().map(Value::depth).max().unwrap_or(0)
    }

    fn tuple(&mut self, items: Vec<Value>) -> Result<(), PickleError> {
        let d = Self::container_depth(&items);
        self.push(Value::Tuple(Rc::new(items), d))
    }

    fn charge(&mut self, n: usize) -> Result<(), PickleError> {
        self.work += n;
        if self.work > MAX_WORK {
            return self.bad("too much copying (not a torch.save pickle)");
        }
        Ok(())
    }

    /// Appends to the list on top of the stack.
    fn extend_list(&mut self, items: Vec<Value>) -> Result<(), PickleError> {
        let add = items.iter().map(Value::depth).max().unwrap_or(0) + 1;
        let shared = match self.top()? {
            Value::List(l, _) => Rc::strong_count(l) > 1,
            _ => return self.bad("APPEND to a non-list"),
        };
        if shared {
            let len = match self.top()? {
                Value::List(l, _) => l.len(),
                _ => 0,
            };
            self.charge(len)?;
        }
        let Value::List(l, d) = self.top()? else {
            return self.bad("APPEND to a non-list");
        };
        Rc::make_mut(l).extend(items);
        *d = (*d).max(add);
        if *d > MAX_DEPTH {
            return self.bad(format!("nesting deeper than {MAX_DEPTH}"));
        }
        Ok(())
    }

    /// Sets key/value pairs of the dict on top of the stack.
    fn set_items(&mut self, items: Vec<Value>) -> Result<(), PickleError> {
        if items.len() % 2 != 0 {
            return self.bad("odd number of items for SETITEMS");
        }
        let add = items.iter().map(Value::depth).max().unwrap_or(0) + 1;
        let (shared, len) = match self.top()? {
            Value::Dict(d, _) => (Rc::strong_count(d) > 1, d.len()),
            _ => return self.bad("SETITEM on a non-dict"),
        };
        // A copy when shared, and one comparison per existing key for each key set.
        self.charge(len.saturating_mul(items.len() / 2 + usize::from(shared)))?;
        let Value::Dict(map, d) = self.top()? else {
            return self.bad("SETITEM on a non-dict");
        };
        let map = Rc::make_mut(map);
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            match map.iter_mut().find(|(key, _)| same_key(key, &k)) {
                Some(slot) => slot.1 = v,
                None => map.push((k, v)),
            }
        }
        *d = (*d).max(add);
        if *d > MAX_DEPTH {
            return self.bad(format!("nesting deeper than {MAX_DEPTH}"));
        }
        Ok(())
    }

    fn call(&mut self, f: Value, args: Value) -> Result<Value, PickleError> {
        let Value::Tuple(args, _) = args else {
            return self.bad("call with arguments that are not a tuple");
        };
        match f {
            Value::Global(Global::DictLike) => Ok(Value::Dict(Rc::new(Vec::new()), 1)),
            Value::Global(Global::ListLike) => Ok(Value::List(Rc::new(Vec::new()), 1)),
            Value::Global(Global::RebuildParameter) => match args.first() {
                Some(t @ Value::Tensor(_)) => Ok(t.clone()),
                _ => self.bad("_rebuild_parameter of a non-tensor"),
            },
            Value::Global(Global::RebuildTensor) => self.rebuild_tensor(&args),
            other => self.bad(format!("call of {other:?}")),
        }
    }

    fn rebuild_tensor(&self, args: &[Value]) -> Result<Value, PickleError> {
        let ints = |v: Option<&Value>| -> Option<Vec<u64>> {
            match v? {
                Value::Tuple(t, _) | Value::List(t, _) => t.iter().map(Value::as_u64).collect(),
                _ => None,
            }
        };
        let Some(Value::Storage {
            storage_type,
            key,
            numel,
        }) = args.first()
        else {
            return self.bad("_rebuild_tensor_v2 without a storage");
        };
        let (Some(offset), Some(size), Some(stride)) = (
            args.get(1).and_then(Value::as_u64),
            ints(args.get(2)),
            ints(args.get(3)),
        ) else {
            return self.bad("_rebuild_tensor_v2 without offset, size and stride");
        };
        if size.len() != stride.len() {
            return self.bad("size and stride of different lengths");
        }
        Ok(Value::Tensor(Rc::new(TensorRef {
            storage_type: storage_type.clone(),
            key: key.clone(),
            numel: *numel,
            offset,
            size,
            stride,
        })))
    }

    fn persistent(&self, pid: Value) -> Result<Value, PickleError> {
        let Value::Tuple(t, _) = pid else {
            return self.bad("persistent id is not a tuple");
        };
        match t.as_slice() {
            [tag, Value::Global(Global::Storage(ty)), key, _location, numel]
                if tag.as_str() == Some("storage") =>
            {
                let (Some(key), Some(numel)) = (key.as_str(), numel.as_u64()) else {
                    return self.bad("storage id without key and size");
                };
                Ok(Value::Storage {
                    storage_type: ty.clone(),
                    key: key.to_string(),
                    numel,
                })
            }
            _ => self.bad("persistent id is not ('storage', type, key, location, size)"),
        }
    }

    fn run(&mut self) -> Result<Value, PickleError> {
        loop {
            let Some(&op) = self.data.get(self.pos) else {
                return self.bad("no STOP");
            };
            self.pos += 1;
            match op {
                0x80 => {
                    self.take(1)?;
                }
                0x95 => {
                    self.take(8)?;
                }
                b'.' => return self.pop(),
                b'(' => {
                    if self.marks.len() >= MAX_STACK {
                        return self.bad(format!("more than {MAX_STACK} marks"));
                    }
                    self.marks.push(self.stack.len())
                }
                b')' => self.tuple(Vec::new())?,
                b't' => {
                    let items = self.pop_mark()?;
                    self.tuple(items)?
                }
                0x85..=0x87 => {
                    let k = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(k);
                    for _ in 0..k {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.tuple(items)?
                }
                b']' => self.push(Value::List(Rc::new(Vec::new()), 1))?,
                b'l' => {
                    let items = self.pop_mark()?;
                    let d = Self::container_depth(&items);
                    self.push(Value::List(Rc::new(items), d))?
                }
                b'a' => {
                    let v = self.pop()?;
                    self.extend_list(vec![v])?
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.extend_list(items)?
                }
                b'}' => self.push(Value::Dict(Rc::new(Vec::new()), 1))?,
                b'd' => {
                    let items = self.pop_mark()?;
                    self.push(Value::Dict(Rc::new(Vec::new()), 1))?;
                    self.set_items(items)?
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    self.set_items(vec![k, v])?
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    self.set_items(items)?
                }
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool)?,
                0x89 => self.push(Value::Bool)?,
                b'K' => {
                    let v = self.uint(1)? as i64;
                    self.push(Value::Int(v))?
                }
                b'M' => {
                    let v = self.uint(2)? as i64;
                    self.push(Value::Int(v))?
                }
                b'J' => {
                    let v = self.uint(4)? as u32 as i32 as i64;
                    self.push(Value::Int(v))?
                }
                0x8a => {
                    let n = self.uint(1)? as usize;
                    if n > 8 {
                        return self.bad(format!("LONG1 of {n} bytes"));
                    }
                    let b = self.take(n as u64)?;
                    let mut v = b.iter().rev().fold(0i64, |acc, &x| (acc << 8) | x as i64);
                    if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
                        v -= 1i64 << (8 * n);
                    }
                    self.push(Value::Int(v))?
                }
                b'G' => {
                    self.take(8)?;
                    self.push(Value::Float)?
                }
                b'X' | 0x8c | 0x8d | b'T' | b'U' => {
                    let n = match op {
                        b'X' | b'T' => self.uint(4)?,
                        0x8c | b'U' => self.uint(1)?,
                        _ => self.uint(8)?,
                    };
                    let s: Rc<str> = String::from_utf8_lossy(self.take(n)?).into();
                    self.push(Value::Str(s))?
                }
                b'B' | b'C' | 0x8e => {
                    let n = match op {
                        b'B' => self.uint(4)?,
                        b'C' => self.uint(1)?,
                        _ => self.uint(8)?,
                    };
                    self.take(n)?;
                    self.push(Value::Bytes)?
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let g = global(&module, &name)?;
                    self.push(Value::Global(g))?
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Some(module), Some(name)) = (module.as_str(), name.as_str()) else {
                        return self.bad("STACK_GLOBAL of non-strings");
                    };
                    let g = global(module, name)?;
                    self.push(Value::Global(g))?
                }
                b'q' | b'r' | 0x94 => {
                    let k = match op {
                        b'q' => self.uint(1)?,
                        b'r' => self.uint(4)?,
                        _ => self.memo.len() as u64,
                    };
                    let v = self.top()?.clone();
                    self.memo.insert(k, v);
                }
                b'h' | b'j' => {
                    let k = if op == b'h' {
                        self.uint(1)?
                    } else {
                        self.uint(4)?
                    };
                    let Some(v) = self.memo.get(&k).cloned() else {
                        return self.bad(format!("memo {k} was never set"));
                    };
                    self.push(v)?
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let v = self.persistent(pid)?;
                    self.push(v)?
                }
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let f = self.pop()?;
                    let v = self.call(f, args)?;
                    self.push(v)?
                }
                b'b' => {
                    // BUILD: state for the object below; the objects read here keep none.
                    self.pop()?;
                    self.top()?;
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let v = self.top()?.clone();
                    self.push(v)?
                }
                other => return self.bad(format!("unsupported opcode 0x{other:02x}")),
            }
        }
    }
}

/// Dict keys compare by value for strings and integers (what `torch.save` dicts use).
fn same_key(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        _ => false,
    }
}
