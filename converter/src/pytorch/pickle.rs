//! A restricted unpickler for the `data.pkl` of a `torch.save` archive. It
//! interprets the pickle opcodes a state dict needs (dicts, OrderedDict,
//! tuples, lists, numbers, strings, torch's storage persistent ids and
//! `_rebuild_tensor_v2`) and nothing else: any other global, any other
//! callable and every opcode that builds arbitrary objects (INST, OBJ,
//! NEWOBJ, EXT*) is an error. Nothing is ever executed or imported; the
//! result is plain data describing tensors over storages.
//!
//! Hostile input is bounded: containers nest at most `MAX_DEPTH` deep, a
//! container can only be modified before it is put into another one (so the
//! recorded depths stay true and no cycles form), and every length is
//! checked against the bytes left.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Element types of torch storages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl Elem {
    pub fn size(self) -> usize {
        match self {
            Elem::F64 | Elem::I64 => 8,
            Elem::F32 | Elem::I32 => 4,
            Elem::F16 | Elem::BF16 | Elem::I16 => 2,
            Elem::I8 | Elem::U8 | Elem::Bool => 1,
        }
    }

    fn from_storage_class(name: &str) -> Option<Elem> {
        Some(match name {
            "DoubleStorage" => Elem::F64,
            "FloatStorage" => Elem::F32,
            "HalfStorage" => Elem::F16,
            "BFloat16Storage" => Elem::BF16,
            "LongStorage" => Elem::I64,
            "IntStorage" => Elem::I32,
            "ShortStorage" => Elem::I16,
            "CharStorage" => Elem::I8,
            "ByteStorage" => Elem::U8,
            "BoolStorage" => Elem::Bool,
            _ => return None,
        })
    }
}

/// A storage named by a persistent id: `data/{key}` in the archive.
#[derive(Clone, Debug, PartialEq)]
pub struct StorageRef {
    pub key: String,
    pub elem: Elem,
    /// Elements in the storage.
    pub numel: u64,
}

/// A tensor as `_rebuild_tensor_v2` describes it (offset and strides in elements).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorRef {
    pub storage: Rc<StorageRef>,
    pub offset: u64,
    pub shape: Vec<u64>,
    pub stride: Vec<u64>,
}

/// The globals the unpickler knows; everything else is refused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Global {
    OrderedDict,
    RebuildTensorV2,
    RebuildParameter,
    StorageClass(Elem),
}

fn resolve_global(module: &str, name: &str) -> Result<Global, String> {
    Ok(match (module, name) {
        ("collections", "OrderedDict") => Global::OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2") => Global::RebuildTensorV2,
        ("torch._utils", "_rebuild_parameter" | "_rebuild_parameter_with_state") => {
            Global::RebuildParameter
        }
        ("torch", n) if Elem::from_storage_class(n).is_some() => {
            Global::StorageClass(Elem::from_storage_class(n).unwrap_or(Elem::U8))
        }
        _ => {
            return Err(format!(
                "the pickle references the Python global `{module}.{name}`, which mllm refuses to load: \
                 only tensors, storages, OrderedDict, dicts, lists, tuples, numbers and strings are allowed \
                 (nothing in a checkpoint is ever executed; save the model's state_dict instead)"
            ))
        }
    })
}

/// Containers nest at most this deep.
pub const MAX_DEPTH: u32 = 64;

#[derive(Debug)]
pub struct Container<T> {
    pub items: RefCell<T>,
    depth: std::cell::Cell<u32>,
    /// Set once the container is inside another; it may not change after.
    sealed: std::cell::Cell<bool>,
}

type List = Rc<Container<Vec<Val>>>;
type Dict = Rc<Container<Vec<(Val, Val)>>>;

/// An unpickled value.
#[derive(Clone, Debug)]
pub enum Val {
    None,
    /// Booleans, floats and bytes are kept only as their kind: nothing
    /// in a state dict that mllm reads depends on their values.
    Bool,
    Int(i64),
    Float,
    Str(Rc<str>),
    Bytes,
    Tuple(Rc<Vec<Val>>, u32),
    List(List),
    Dict(Dict),
    Global(Global),
    Storage(Rc<StorageRef>),
    Tensor(Rc<TensorRef>),
}

impl Val {
    fn depth(&self) -> u32 {
        match self {
            Val::Tuple(_, d) => *d,
            Val::List(c) => c.depth.get(),
            Val::Dict(c) => c.depth.get(),
            _ => 0,
        }
    }

    /// Marks a value as nested in another; returns its (now final) depth.
    fn seal(&self) -> u32 {
        match self {
            Val::List(c) => c.sealed.set(true),
            Val::Dict(c) => c.sealed.set(true),
            _ => {}
        }
        self.depth()
    }

    fn kind(&self) -> &'static str {
        match self {
            Val::None => "None",
            Val::Bool => "bool",
            Val::Int(_) => "int",
            Val::Float => "float",
            Val::Str(_) => "str",
            Val::Bytes => "bytes",
            Val::Tuple(..) => "tuple",
            Val::List(_) => "list",
            Val::Dict(_) => "dict",
            Val::Global(_) => "global",
            Val::Storage(_) => "storage",
            Val::Tensor(_) => "tensor",
        }
    }
}

fn container<T>(items: T) -> Rc<Container<T>> {
    Rc::new(Container {
        items: RefCell::new(items),
        depth: std::cell::Cell::new(1),
        sealed: std::cell::Cell::new(false),
    })
}

/// Checks `c` may still change and records that it now holds children of
/// depth `child`.
fn grow<T>(c: &Container<T>, child: u32) -> Result<(), String> {
    if c.sealed.get() {
        return Err("the pickle modifies a container after nesting it in another".into());
    }
    let d = c.depth.get().max(child + 1);
    if d > MAX_DEPTH {
        return Err(format!("containers nest more than {MAX_DEPTH} deep"));
    }
    c.depth.set(d);
    Ok(())
}

fn tuple(items: Vec<Val>) -> Result<Val, String> {
    let d = 1 + items.iter().map(Val::seal).max().unwrap_or(0);
    if d > MAX_DEPTH {
        return Err(format!("containers nest more than {MAX_DEPTH} deep"));
    }
    Ok(Val::Tuple(Rc::new(items), d))
}

struct Machine<'a> {
    b: &'a [u8],
    pos: usize,
    stack: Vec<Val>,
    marks: Vec<usize>,
    memo: HashMap<u32, Val>,
    storages: HashMap<String, Rc<StorageRef>>,
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: u64) -> Result<&'a [u8], String> {
        if n > (self.b.len() - self.pos) as u64 {
            return Err(format!(
                "needs {n} bytes at offset {} but the pickle ends at {}",
                self.pos,
                self.b.len()
            ));
        }
        let s = &self.b[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn le<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N as u64)?);
        Ok(a)
    }

    fn line(&mut self) -> Result<&'a str, String> {
        let rest = &self.b[self.pos..];
        let n = rest
            .iter()
            .take(1024)
            .position(|&c| c == b'\n')
            .ok_or("a GLOBAL name is not terminated by a newline")?;
        let s = std::str::from_utf8(&rest[..n]).map_err(|_| "a GLOBAL name is not UTF-8")?;
        self.pos += n + 1;
        Ok(s)
    }

    fn pop(&mut self) -> Result<Val, String> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err("stack underflow".into());
        }
        Ok(self.stack.pop().expect("checked non-empty"))
    }

    fn pop_mark(&mut self) -> Result<Vec<Val>, String> {
        let m = self.marks.pop().ok_or("no MARK to pop to")?;
        Ok(self.stack.split_off(m))
    }

    fn top(&self) -> Result<&Val, String> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err("stack underflow".into());
        }
        Ok(self.stack.last().expect("checked non-empty"))
    }

    fn string(&mut self, n: u64) -> Result<Val, String> {
        let raw = self.take(n)?;
        Ok(Val::Str(Rc::from(String::from_utf8_lossy(raw).as_ref())))
    }

    fn memo_get(&self, i: u32) -> Result<Val, String> {
        self.memo
            .get(&i)
            .cloned()
            .ok_or_else(|| format!("memo entry {i} was never stored"))
    }

    fn memo_put(&mut self, i: u32) -> Result<(), String> {
        let v = self.top()?.clone();
        self.memo.insert(i, v);
        Ok(())
    }

    fn append(&mut self, items: Vec<Val>) -> Result<(), String> {
        let Val::List(l) = self.top()? else {
            return Err(format!("APPEND to a {}", self.top()?.kind()));
        };
        let child = items.iter().map(Val::seal).max().unwrap_or(0);
        grow(l, child)?;
        l.items.borrow_mut().extend(items);
        Ok(())
    }

    fn set_items(&mut self, items: Vec<Val>) -> Result<(), String> {
        if !items.len().is_multiple_of(2) {
            return Err("SETITEMS with an odd number of values".into());
        }
        let Val::Dict(d) = self.top()? else {
            return Err(format!("SETITEM on a {}", self.top()?.kind()));
        };
        let child = items.iter().map(Val::seal).max().unwrap_or(0);
        grow(d, child)?;
        let mut it = items.into_iter();
        let mut map = d.items.borrow_mut();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            map.push((k, v));
        }
        Ok(())
    }

    fn persistent_load(&mut self, pid: Val) -> Result<Val, String> {
        let bad =
            || "a persistent id that is not ('storage', class, key, location, size)".to_string();
        let Val::Tuple(t, _) = pid else {
            return Err(bad());
        };
        let [Val::Str(tag), Val::Global(Global::StorageClass(elem)), Val::Str(key), Val::Str(_loc), Val::Int(numel)] =
            t.as_slice()
        else {
            return Err(bad());
        };
        if &**tag != "storage" || *numel < 0 {
            return Err(bad());
        }
        let s = StorageRef {
            key: key.to_string(),
            elem: *elem,
            numel: *numel as u64,
        };
        if let Some(old) = self.storages.get(&s.key) {
            if **old != s {
                return Err(format!(
                    "storage `{}` is described twice differently ({:?} and {:?})",
                    s.key, old.elem, s.elem
                ));
            }
            return Ok(Val::Storage(old.clone()));
        }
        let s = Rc::new(s);
        self.storages.insert(s.key.clone(), s.clone());
        Ok(Val::Storage(s))
    }

    fn reduce(&mut self, f: Val, args: Val) -> Result<Val, String> {
        let Val::Tuple(args, _) = args else {
            return Err(format!(
                "REDUCE with {} arguments, not a tuple",
                args.kind()
            ));
        };
        match f {
            Val::Global(Global::OrderedDict) if args.is_empty() => Ok(Val::Dict(container(vec![]))),
            Val::Global(Global::RebuildTensorV2) => rebuild_tensor(&args),
            Val::Global(Global::RebuildParameter) => match args.first() {
                Some(t @ Val::Tensor(_)) => Ok(t.clone()),
                _ => Err("_rebuild_parameter without a tensor".into()),
            },
            Val::Global(g) => Err(format!("calling {g:?} with these arguments is not allowed")),
            other => Err(format!(
                "REDUCE calls a {}, not an allowed global",
                other.kind()
            )),
        }
    }
}

fn ints(v: &Val, what: &str) -> Result<Vec<u64>, String> {
    let Val::Tuple(t, _) = v else {
        return Err(format!("tensor {what} is a {}, not a tuple", v.kind()));
    };
    t.iter()
        .map(|x| match x {
            Val::Int(i) if *i >= 0 => Ok(*i as u64),
            _ => Err(format!(
                "tensor {what} holds a non-integer or negative value"
            )),
        })
        .collect()
}

/// `_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks, [metadata])`.
fn rebuild_tensor(args: &[Val]) -> Result<Val, String> {
    let [Val::Storage(s), Val::Int(offset), size, stride, ..] = args else {
        return Err("_rebuild_tensor_v2 without (storage, offset, size, stride)".into());
    };
    let (shape, stride) = (ints(size, "size")?, ints(stride, "stride")?);
    if shape.len() != stride.len() || *offset < 0 {
        return Err("_rebuild_tensor_v2 with a size and stride of different ranks".into());
    }
    Ok(Val::Tensor(Rc::new(TensorRef {
        storage: s.clone(),
        offset: *offset as u64,
        shape,
        stride,
    })))
}

/// Runs the pickle program; returns the value STOP leaves.
pub fn unpickle(b: &[u8]) -> Result<Val, String> {
    let mut m = Machine {
        b,
        pos: 0,
        stack: vec![],
        marks: vec![],
        memo: HashMap::new(),
        storages: HashMap::new(),
    };
    loop {
        let at = m.pos;
        let op = m
            .take(1)
            .map_err(|_| "the pickle ends without STOP".to_string())?[0];
        step(&mut m, op).map_err(|e| format!("pickle opcode {op:#04x} at offset {at}: {e}"))?;
        if op == b'.' {
            return m.pop();
        }
    }
}

fn step(m: &mut Machine, op: u8) -> Result<(), String> {
    let v = match op {
        0x80 => {
            let p = m.le::<1>()?[0];
            if p > 5 {
                return Err(format!("pickle protocol {p} is newer than 5"));
            }
            return Ok(());
        }
        0x95 => {
            m.le::<8>()?; // FRAME: a length hint only
            return Ok(());
        }
        b'.' => return Ok(()),
        b'(' => {
            m.marks.push(m.stack.len());
            return Ok(());
        }
        b'0' => {
            m.pop()?;
            return Ok(());
        }
        b'1' => {
            m.pop_mark()?;
            return Ok(());
        }
        b'2' => m.top()?.clone(),
        b')' => tuple(vec![])?,
        b']' => Val::List(container(vec![])),
        b'}' => Val::Dict(container(vec![])),
        b't' => {
            let items = m.pop_mark()?;
            tuple(items)?
        }
        0x85..=0x87 => {
            let n = (op - 0x84) as usize;
            let mut items = (0..n).map(|_| m.pop()).collect::<Result<Vec<_>, _>>()?;
            items.reverse();
            tuple(items)?
        }
        b'a' => {
            let v = m.pop()?;
            return m.append(vec![v]);
        }
        b'e' => {
            let items = m.pop_mark()?;
            return m.append(items);
        }
        b's' => {
            let v = m.pop()?;
            let k = m.pop()?;
            return m.set_items(vec![k, v]);
        }
        b'u' => {
            let items = m.pop_mark()?;
            return m.set_items(items);
        }
        b'N' => Val::None,
        0x88 | 0x89 => Val::Bool,
        b'K' => Val::Int(m.le::<1>()?[0] as i64),
        b'M' => Val::Int(u16::from_le_bytes(m.le()?) as i64),
        b'J' => Val::Int(i32::from_le_bytes(m.le()?) as i64),
        0x8a => {
            let n = m.le::<1>()?[0] as usize;
            if n > 8 {
                return Err(format!("an integer of {n} bytes does not fit 64 bits"));
            }
            let raw = m.take(n as u64)?;
            let mut a = if raw.last().is_some_and(|&x| x & 0x80 != 0) {
                [0xFF; 8]
            } else {
                [0; 8]
            };
            a[..n].copy_from_slice(raw);
            Val::Int(i64::from_le_bytes(a))
        }
        b'G' => {
            m.le::<8>()?;
            Val::Float
        }
        b'X' => {
            let n = u32::from_le_bytes(m.le()?) as u64;
            m.string(n)?
        }
        0x8c | b'U' => {
            let n = m.le::<1>()?[0] as u64;
            m.string(n)?
        }
        0x8d => {
            let n = u64::from_le_bytes(m.le()?);
            m.string(n)?
        }
        b'T' => {
            let n = i32::from_le_bytes(m.le()?);
            m.string(u64::try_from(n).map_err(|_| "a negative string length")?)?
        }
        b'B' | b'C' | 0x8e => {
            let n = match op {
                b'B' => u32::from_le_bytes(m.le()?) as u64,
                b'C' => m.le::<1>()?[0] as u64,
                _ => u64::from_le_bytes(m.le()?),
            };
            m.take(n)?;
            Val::Bytes
        }
        b'q' => {
            let i = m.le::<1>()?[0] as u32;
            return m.memo_put(i);
        }
        b'r' => {
            let i = u32::from_le_bytes(m.le()?);
            return m.memo_put(i);
        }
        0x94 => {
            let i = m.memo.len() as u32;
            return m.memo_put(i);
        }
        b'h' => {
            let i = m.le::<1>()?[0] as u32;
            m.memo_get(i)?
        }
        b'j' => {
            let i = u32::from_le_bytes(m.le()?);
            m.memo_get(i)?
        }
        b'c' => {
            let module = m.line()?;
            let name = m.line()?;
            Val::Global(resolve_global(module, name)?)
        }
        0x93 => {
            let name = m.pop()?;
            let module = m.pop()?;
            let (Val::Str(module), Val::Str(name)) = (module, name) else {
                return Err("STACK_GLOBAL with non-string names".into());
            };
            Val::Global(resolve_global(&module, &name)?)
        }
        b'R' => {
            let args = m.pop()?;
            let f = m.pop()?;
            args.seal();
            m.reduce(f, args)?
        }
        b'b' => {
            // State set on an object: an OrderedDict's attributes (the
            // state dict's `_metadata`), which mllm does not need.
            let state = m.pop()?;
            state.seal();
            match m.top()? {
                Val::Dict(d) if !d.sealed.get() => {}
                other => return Err(format!("BUILD on a {}", other.kind())),
            }
            return Ok(());
        }
        b'Q' => {
            let pid = m.pop()?;
            pid.seal();
            m.persistent_load(pid)?
        }
        b'i' | b'o' | 0x81 | 0x92 => return Err(
            "the pickle builds an arbitrary Python object (INST/OBJ/NEWOBJ), which mllm refuses"
                .into(),
        ),
        0x82..=0x84 => {
            return Err("the pickle uses the extension registry (EXT), which mllm refuses".into())
        }
        _ => {
            return Err(
                "this opcode is not used by torch.save state dicts and is not supported".into(),
            )
        }
    };
    m.stack.push(v);
    Ok(())
}
