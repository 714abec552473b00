//! The ONNX side of the exporter: a list of nodes under construction, with
//! unique value names and small constants stored inline (deduplicated).
//! It knows nothing of our graphs; `lower` drives it one op at a time.

use std::collections::{HashMap, HashSet};

use super::proto::{AttributeProto, DataType, NodeProto, TensorProto};

pub struct Builder {
    /// The default domain's opset the nodes are written for.
    pub opset: i64,
    pub nodes: Vec<NodeProto>,
    /// Initializers stored inside `model.onnx` (small constants).
    pub inline: Vec<TensorProto>,
    consts: HashMap<(i32, Vec<i64>, Vec<u8>), String>,
    used: HashSet<String>,
    next: usize,
}

impl Builder {
    pub fn new(opset: i64) -> Builder {
        Builder {
            opset,
            nodes: vec![],
            inline: vec![],
            consts: HashMap::new(),
            used: HashSet::new(),
            next: 0,
        }
    }

    /// Claims `name` (a graph input, output or initializer name) so no
    /// generated name collides with it; false when it is already taken.
    pub fn reserve(&mut self, name: &str) -> bool {
        self.used.insert(name.to_string())
    }

    /// A new value name starting with `hint`.
    pub fn fresh(&mut self, hint: &str) -> String {
        loop {
            self.next += 1;
            let name = format!("{hint}_{}", self.next);
            if self.used.insert(name.clone()) {
                return name;
            }
        }
    }

    /// Adds `op_type(inputs) -> output` in the default domain.
    pub fn node_into(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        output: &str,
        attrs: Vec<AttributeProto>,
    ) {
        let name = format!("{op_type}_{}", self.nodes.len());
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.to_string()],
            name: Some(name),
            op_type: Some(op_type.into()),
            domain: None,
            attribute: attrs,
            ..Default::default()
        });
    }

    /// Adds `op_type(inputs)` with `outputs` outputs (TopK: values and
    /// indices) and returns their names.
    pub fn node_multi(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        outputs: usize,
        attrs: Vec<AttributeProto>,
    ) -> Vec<String> {
        let hint = op_type.to_ascii_lowercase();
        let outs: Vec<String> = (0..outputs).map(|_| self.fresh(&hint)).collect();
        let name = format!("{op_type}_{}", self.nodes.len());
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outs.clone(),
            name: Some(name),
            op_type: Some(op_type.into()),
            domain: None,
            attribute: attrs,
            ..Default::default()
        });
        outs
    }

    /// Adds `op_type(inputs)` and returns the name of its one output.
    pub fn node(&mut self, op_type: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> String {
        let out = self.fresh(&op_type.to_ascii_lowercase());
        self.node_into(op_type, inputs, &out, attrs);
        out
    }

    /// An inline initializer of `elem` with `dims` and little-endian `raw`
    /// bytes; identical constants share one name.
    pub fn constant(&mut self, elem: DataType, dims: &[usize], raw: Vec<u8>) -> String {
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let key = (elem as i32, dims.clone(), raw.clone());
        if let Some(n) = self.consts.get(&key) {
            return n.clone();
        }
        let name = self.fresh("const");
        self.inline.push(TensorProto {
            dims,
            data_type: Some(elem as i32),
            name: Some(name.clone()),
            raw_data: Some(raw),
            ..Default::default()
        });
        self.consts.insert(key, name.clone());
        name
    }

    pub fn i64s(&mut self, v: &[i64]) -> String {
        let raw = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.constant(DataType::Int64, &[v.len()], raw)
    }

    /// A shape operand for Reshape/Expand.
    pub fn shape(&mut self, s: &[usize]) -> String {
        let v: Vec<i64> = s.iter().map(|&d| d as i64).collect();
        self.i64s(&v)
    }

    pub fn f32s(&mut self, dims: &[usize], v: &[f32]) -> String {
        let raw = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.constant(DataType::Float, dims, raw)
    }

    pub fn i32s(&mut self, dims: &[usize], v: &[i32]) -> String {
        let raw = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.constant(DataType::Int32, dims, raw)
    }

    pub fn bools(&mut self, dims: &[usize], v: &[bool]) -> String {
        let raw = v.iter().map(|&b| u8::from(b)).collect();
        self.constant(DataType::Bool, dims, raw)
    }

    pub fn f32_scalar(&mut self, v: f32) -> String {
        self.f32s(&[], &[v])
    }

    // Shorthands for the ops every lowering uses.

    pub fn reshape(&mut self, x: &str, shape: &[usize]) -> String {
        let s = self.shape(shape);
        // A 0 in Reshape's shape means "keep that dimension" unless
        // allowzero is set; only empty tensors need it.
        let attrs = if shape.contains(&0) {
            vec![super::proto::attr_int("allowzero", 1)]
        } else {
            vec![]
        };
        self.node("Reshape", &[x, &s], attrs)
    }

    pub fn transpose(&mut self, x: &str, perm: &[usize]) -> String {
        let p: Vec<i64> = perm.iter().map(|&d| d as i64).collect();
        self.node("Transpose", &[x], vec![super::proto::attr_ints("perm", &p)])
    }

    pub fn cast(&mut self, x: &str, to: DataType) -> String {
        self.node("Cast", &[x], vec![super::proto::attr_int("to", to as i64)])
    }

    pub fn binary(&mut self, op_type: &str, a: &str, b: &str) -> String {
        self.node(op_type, &[a, b], vec![])
    }

    /// `x[start..end]` along `axis` (step 1).
    pub fn slice(&mut self, x: &str, axis: usize, start: usize, end: usize) -> String {
        self.slice_step(x, axis, start, end, 1)
    }

    pub fn slice_step(
        &mut self,
        x: &str,
        axis: usize,
        start: usize,
        end: usize,
        step: usize,
    ) -> String {
        let s = self.i64s(&[start as i64]);
        let e = self.i64s(&[end as i64]);
        let a = self.i64s(&[axis as i64]);
        let st = self.i64s(&[step as i64]);
        self.node("Slice", &[x, &s, &e, &a, &st], vec![])
    }

    /// `op_type` (ReduceMean, ReduceMax, ReduceMin, ReduceSum) over `axes`:
    /// axes are an attribute before opset 18 (ReduceSum: before 13), an
    /// input from then on.
    pub fn reduce(&mut self, op_type: &str, x: &str, axes: &[i64], keepdims: bool) -> String {
        let keep = super::proto::attr_int("keepdims", i64::from(keepdims));
        let as_input = op_type == "ReduceSum" || self.opset >= 18;
        if as_input {
            let a = self.i64s(axes);
            self.node(op_type, &[x, &a], vec![keep])
        } else {
            self.node(
                op_type,
                &[x],
                vec![super::proto::attr_ints("axes", axes), keep],
            )
        }
    }

    pub fn concat(&mut self, xs: &[&str], axis: usize) -> String {
        self.node(
            "Concat",
            xs,
            vec![super::proto::attr_int("axis", axis as i64)],
        )
    }
}
