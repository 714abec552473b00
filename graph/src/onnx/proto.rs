//! ONNX's message types, generated at build time by prost-build from the
//! vendored `proto/onnx.proto` (see `build.rs`), plus the few constructors
//! the exporter repeats: attributes, tensor types, opset ids.

#![allow(clippy::all, missing_docs)]

include!(concat!(env!("OUT_DIR"), "/onnx.rs"));

pub use attribute_proto::AttributeType;
pub use tensor_proto::{DataLocation, DataType};

/// The opset exported graphs import from the default domain: the oldest
/// that has LayerNormalization, accepted by the vendors' converters.
/// (`--quant keep` of block-quantized weights needs 21.)
pub const OPSET: i64 = 17;

/// The IR version that goes with a default-domain opset (onnx's table:
/// opset 17 came with IR 8, opset 21 with IR 10).
pub fn ir_version(opset: i64) -> i64 {
    match opset {
        ..=17 => 8,
        18..=19 => 9,
        _ => 10,
    }
}

pub fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

pub fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

pub fn attr_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}

/// A graph input or output: a dense tensor of `elem` with a static shape.
pub fn value_info(name: &str, elem: DataType, shape: &[usize]) -> ValueInfoProto {
    let dim = shape
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
            denotation: None,
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: None,
        }),
        doc_string: None,
        metadata_props: vec![],
    }
}

pub fn entry(key: &str, value: impl Into<String>) -> StringStringEntryProto {
    StringStringEntryProto {
        key: Some(key.into()),
        value: Some(value.into()),
    }
}

/// The name ONNX's documents use for an element type (io.json, messages).
pub fn type_name(t: DataType) -> &'static str {
    match t {
        DataType::Float => "float32",
        DataType::Float16 => "float16",
        DataType::Bfloat16 => "bfloat16",
        DataType::Int32 => "int32",
        DataType::Int64 => "int64",
        DataType::Int8 => "int8",
        DataType::Uint8 => "uint8",
        DataType::Int4 => "int4",
        DataType::Uint4 => "uint4",
        DataType::Bool => "bool",
        _ => "other",
    }
}
