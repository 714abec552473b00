//! Indexing and slicing of lists and tensors (`x[0, ..., 1:]`); tensor
//! indexes become executor ops (slices and reshapes).

use std::rc::Rc;

use mllm_backends::{Op, Tensor};
use mllm_dsl::program::*;

use crate::error::{RtError, RtResult};
use crate::eval::{Ctx, Interp};
use crate::value::Value;

impl Interp<'_> {
    pub(crate) fn index(
        &mut self,
        base: Value,
        items: &[IndexItem],
        ctx: &mut Ctx,
    ) -> RtResult<Value> {
        match base {
            Value::List(v) | Value::Tuple(v) => {
                let [item] = items else {
                    return Err(RtError::new("mdl::run::index", "lists take one index"));
                };
                match item {
                    IndexItem::Expr(e) => {
                        let i = self.expr(e, ctx)?;
                        let i = self.int_of(&i)?;
                        let n = v.len() as i64;
                        let j = if i < 0 { i + n } else { i };
                        if !(0..n).contains(&j) {
                            return Err(RtError::new(
                                "mdl::run::index",
                                format!("index {i} is out of range for {n} items"),
                            ));
                        }
                        Ok(v[j as usize].clone())
                    }
                    IndexItem::Slice(a, b, s) => {
                        let (start, end, step) = self.slice_bounds(a, b, s, v.len(), ctx)?;
                        Ok(Value::List(Rc::new(
                            (start..end).step_by(step).map(|i| v[i].clone()).collect(),
                        )))
                    }
                    IndexItem::Ellipsis => Err(RtError::new(
                        "mdl::run::index",
                        "`...` applies to tensors only",
                    )),
                }
            }
            Value::Tensor(t) => self.index_tensor(t, items, ctx),
            other => Err(RtError::new(
                "mdl::run::index",
                format!("a {} cannot be indexed", other.type_name()),
            )),
        }
    }

    pub(crate) fn slice_bounds(
        &mut self,
        a: &Option<Expr>,
        b: &Option<Expr>,
        s: &Option<Expr>,
        n: usize,
        ctx: &mut Ctx,
    ) -> RtResult<(usize, usize, usize)> {
        let n = n as i64;
        let mut bound = |e: &Option<Expr>, dflt: i64, this: &mut Self| -> RtResult<i64> {
            match e {
                None => Ok(dflt),
                Some(e) => {
                    let v = this.expr(e, ctx)?;
                    if v.is_none() {
                        return Ok(dflt);
                    }
                    let i = this.int_of(&v)?;
                    Ok(if i < 0 { (i + n).max(0) } else { i.min(n) })
                }
            }
        };
        let start = bound(a, 0, self)?;
        let end = bound(b, n, self)?;
        let step = bound(s, 1, self)?;
        if step <= 0 {
            return Err(RtError::new(
                "mdl::run::index",
                "slice step must be positive",
            ));
        }
        Ok((start as usize, (end.max(start)) as usize, step as usize))
    }

    pub(crate) fn index_tensor(
        &mut self,
        mut t: Tensor,
        items: &[IndexItem],
        ctx: &mut Ctx,
    ) -> RtResult<Value> {
        let explicit = items
            .iter()
            .filter(|i| !matches!(i, IndexItem::Ellipsis))
            .count();
        if items
            .iter()
            .filter(|i| matches!(i, IndexItem::Ellipsis))
            .count()
            > 1
        {
            return Err(RtError::new(
                "mdl::run::index",
                "at most one `...` per index",
            ));
        }
        if explicit > t.rank() {
            return Err(RtError::new(
                "mdl::run::index",
                format!("{explicit} indexes for a tensor of rank {}", t.rank()),
            ));
        }
        // `...` stands for the dimensions no explicit item names, counted on
        // the rank before any integer index removes one.
        let ellipsis_dims = t.rank() - explicit;
        let mut dim = 0usize;
        for item in items {
            match item {
                IndexItem::Ellipsis => dim += ellipsis_dims,
                IndexItem::Expr(e) => {
                    let v = self.expr(e, ctx)?;
                    let n = t.shape()[dim] as i64;
                    let i = self.int_of(&v)?;
                    let j = if i < 0 { i + n } else { i };
                    if !(0..n).contains(&j) {
                        return Err(RtError::new(
                            "mdl::run::index",
                            format!("index {i} is out of range for a dimension of size {n}"),
                        ));
                    }
                    let j = j as usize;
                    let s = self.op(
                        Op::Slice {
                            dim,
                            start: j,
                            end: j + 1,
                            step: 1,
                        },
                        &[&t],
                    )?;
                    let mut shape = s.shape().to_vec();
                    shape.remove(dim);
                    t = self.reshape(&s, shape)?;
                }
                IndexItem::Slice(a, b, s) => {
                    let (start, end, step) = self.slice_bounds(a, b, s, t.shape()[dim], ctx)?;
                    if !(start == 0 && end == t.shape()[dim] && step == 1) {
                        t = self.op(
                            Op::Slice {
                                dim,
                                start,
                                end,
                                step,
                            },
                            &[&t],
                        )?;
                    }
                    dim += 1;
                }
            }
        }
        Ok(Value::Tensor(t))
    }
}
