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

/// The opcodes read, named as in Python's `pickletools`.
mod op {
    pub const PROTO: u8 = 0x80;
    pub const FRAME: u8 = 0x95;
    pub const STOP: u8 = b'.';
    pub const MARK: u8 = b'(';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const BUILD: u8 = b'b';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const TUPLE: u8 = b't';
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE3: u8 = 0x87;
    pub const EMPTY_LIST: u8 = b']';
    pub const LIST: u8 = b'l';
    pub const APPEND: u8 = b'a';
    pub const APPENDS: u8 = b'e';
    pub const EMPTY_DICT: u8 = b'}';
    pub const DICT: u8 = b'd';
    pub const SETITEM: u8 = b's';
    pub const SETITEMS: u8 = b'u';
    pub const NONE: u8 = b'N';
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const BININT: u8 = b'J';
    pub const LONG1: u8 = 0x8a;
    pub const BINFLOAT: u8 = b'G';
    pub const BINUNICODE: u8 = b'X';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINSTRING: u8 = b'T';
    pub const SHORT_BINSTRING: u8 = b'U';
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const BINBYTES8: u8 = 0x8e;
    pub const GLOBAL: u8 = b'c';
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const NEWOBJ: u8 = 0x81;
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const MEMOIZE: u8 = 0x94;
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
}

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
        if !items.len().is_multiple_of(2) {
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

    /// Runs opcodes up to `STOP`, whose value it returns.
    fn run(&mut self) -> Result<Value, PickleError> {
        loop {
            let Some(&code) = self.data.get(self.pos) else {
                return self.bad("no STOP");
            };
            self.pos += 1;
            if code == op::STOP {
                return self.pop();
            }
            self.step(code)?;
        }
    }

    /// Runs one opcode other than `STOP`; any opcode not listed here is refused.
    fn step(&mut self, code: u8) -> Result<(), PickleError> {
        match code {
            // Framing and the stack: the protocol number and frame sizes change nothing here.
            op::PROTO => self.take(1).map(drop),
            op::FRAME => self.take(8).map(drop),
            op::MARK => self.mark(),
            op::POP => self.pop().map(drop),
            op::POP_MARK => self.pop_mark().map(drop),
            op::DUP => self.dup(),
            op::BUILD => self.build(),
            // Containers.
            op::EMPTY_TUPLE => self.tuple(Vec::new()),
            op::TUPLE => self.pop_mark().and_then(|items| self.tuple(items)),
            op::TUPLE1..=op::TUPLE3 => self.tuple_from_top((code - op::TUPLE1 + 1) as usize),
            op::EMPTY_LIST => self.push(Value::List(Rc::new(Vec::new()), 1)),
            op::LIST => self.pop_mark().and_then(|items| self.list(items)),
            op::APPEND => self.pop().and_then(|v| self.extend_list(vec![v])),
            op::APPENDS => self.pop_mark().and_then(|items| self.extend_list(items)),
            op::EMPTY_DICT => self.push(Value::Dict(Rc::new(Vec::new()), 1)),
            op::DICT => self.pop_mark().and_then(|items| self.dict(items)),
            op::SETITEM => self.set_item(),
            op::SETITEMS => self.pop_mark().and_then(|items| self.set_items(items)),
            // Scalars.
            op::NONE => self.push(Value::None),
            op::NEWTRUE | op::NEWFALSE => self.push(Value::Bool),
            op::BININT1 => self.unsigned_int(1),
            op::BININT2 => self.unsigned_int(2),
            op::BININT => self.signed_int4(),
            op::LONG1 => self.long1(),
            op::BINFLOAT => self.float(),
            op::BINUNICODE | op::BINSTRING => self.string(4),
            op::SHORT_BINUNICODE | op::SHORT_BINSTRING => self.string(1),
            op::BINUNICODE8 => self.string(8),
            op::BINBYTES => self.bytes(4),
            op::SHORT_BINBYTES => self.bytes(1),
            op::BINBYTES8 => self.bytes(8),
            // Globals (allow-listed by `global` before anything else happens) and calls.
            op::GLOBAL => self.global_from_lines(),
            op::STACK_GLOBAL => self.global_from_stack(),
            op::BINPERSID => self.persistent_load(),
            op::REDUCE | op::NEWOBJ => self.reduce(),
            // The memo.
            op::BINPUT => self.uint(1).and_then(|k| self.memo_put(k)),
            op::LONG_BINPUT => self.uint(4).and_then(|k| self.memo_put(k)),
            op::MEMOIZE => self.memo_put(self.memo.len() as u64),
            op::BINGET => self.uint(1).and_then(|k| self.memo_get(k)),
            op::LONG_BINGET => self.uint(4).and_then(|k| self.memo_get(k)),
            other => self.bad(format!("unsupported opcode 0x{other:02x}")),
        }
    }

    /// MARK: where the values of the next container begin (at most `MAX_STACK` open marks).
    fn mark(&mut self) -> Result<(), PickleError> {
        if self.marks.len() >= MAX_STACK {
            return self.bad(format!("more than {MAX_STACK} marks"));
        }
        self.marks.push(self.stack.len());
        Ok(())
    }

    /// DUP: the top value again.
    fn dup(&mut self) -> Result<(), PickleError> {
        let v = self.top()?.clone();
        self.push(v)
    }

    /// BUILD: state for the object below; the objects read here keep none.
    fn build(&mut self) -> Result<(), PickleError> {
        self.pop()?;
        self.top()?;
        Ok(())
    }

    /// TUPLE1..TUPLE3: a tuple of the top `k` values.
    fn tuple_from_top(&mut self, k: usize) -> Result<(), PickleError> {
        let mut items = Vec::with_capacity(k);
        for _ in 0..k {
            items.push(self.pop()?);
        }
        items.reverse();
        self.tuple(items)
    }

    /// LIST: a list of the values above the mark.
    fn list(&mut self, items: Vec<Value>) -> Result<(), PickleError> {
        let d = Self::container_depth(&items);
        self.push(Value::List(Rc::new(items), d))
    }

    /// DICT: a new dict of the key/value pairs above the mark.
    fn dict(&mut self, items: Vec<Value>) -> Result<(), PickleError> {
        self.push(Value::Dict(Rc::new(Vec::new()), 1))?;
        self.set_items(items)
    }

    /// SETITEM: the key and value on top, set in the dict below them.
    fn set_item(&mut self) -> Result<(), PickleError> {
        let v = self.pop()?;
        let k = self.pop()?;
        self.set_items(vec![k, v])
    }

    /// BININT1, BININT2: an unsigned little-endian integer of `n` bytes.
    fn unsigned_int(&mut self, n: usize) -> Result<(), PickleError> {
        let v = self.uint(n)? as i64;
        self.push(Value::Int(v))
    }

    /// BININT: a signed little-endian integer of 4 bytes.
    fn signed_int4(&mut self) -> Result<(), PickleError> {
        let v = self.uint(4)? as u32 as i32 as i64;
        self.push(Value::Int(v))
    }

    /// LONG1: a two's complement integer of up to 8 bytes (longer ones are refused).
    fn long1(&mut self) -> Result<(), PickleError> {
        let n = self.uint(1)? as usize;
        if n > 8 {
            return self.bad(format!("LONG1 of {n} bytes"));
        }
        let b = self.take(n as u64)?;
        let mut v = b.iter().rev().fold(0i64, |acc, &x| (acc << 8) | x as i64);
        if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
            v -= 1i64 << (8 * n);
        }
        self.push(Value::Int(v))
    }

    /// BINFLOAT: 8 bytes (skipped: nothing read here keeps floats).
    fn float(&mut self) -> Result<(), PickleError> {
        self.take(8)?;
        self.push(Value::Float)
    }

    /// A string whose length is an `n`-byte integer.
    fn string(&mut self, n: usize) -> Result<(), PickleError> {
        let len = self.uint(n)?;
        let s: Rc<str> = String::from_utf8_lossy(self.take(len)?).into();
        self.push(Value::Str(s))
    }

    /// Bytes whose length is an `n`-byte integer (skipped: nothing read here keeps them).
    fn bytes(&mut self, n: usize) -> Result<(), PickleError> {
        let len = self.uint(n)?;
        self.take(len)?;
        self.push(Value::Bytes)
    }

    /// GLOBAL: module and name on two lines.
    fn global_from_lines(&mut self) -> Result<(), PickleError> {
        let module = self.line()?;
        let name = self.line()?;
        let g = global(&module, &name)?;
        self.push(Value::Global(g))
    }

    /// STACK_GLOBAL: module and name are the top two strings.
    fn global_from_stack(&mut self) -> Result<(), PickleError> {
        let name = self.pop()?;
        let module = self.pop()?;
        let (Some(module), Some(name)) = (module.as_str(), name.as_str()) else {
            return self.bad("STACK_GLOBAL of non-strings");
        };
        let g = global(module, name)?;
        self.push(Value::Global(g))
    }

    /// BINPERSID: a storage named by the persistent id on top.
    fn persistent_load(&mut self) -> Result<(), PickleError> {
        let pid = self.pop()?;
        let v = self.persistent(pid)?;
        self.push(v)
    }

    /// REDUCE, NEWOBJ: calls the callable below the argument tuple.
    fn reduce(&mut self) -> Result<(), PickleError> {
        let args = self.pop()?;
        let f = self.pop()?;
        let v = self.call(f, args)?;
        self.push(v)
    }

    /// BINPUT, LONG_BINPUT, MEMOIZE: the top value under memo key `k`.
    fn memo_put(&mut self, k: u64) -> Result<(), PickleError> {
        let v = self.top()?.clone();
        self.memo.insert(k, v);
        Ok(())
    }

    /// BINGET, LONG_BINGET: the value under memo key `k`.
    fn memo_get(&mut self, k: u64) -> Result<(), PickleError> {
        let Some(v) = self.memo.get(&k).cloned() else {
            return self.bad(format!("memo {k} was never set"));
        };
        self.push(v)
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
