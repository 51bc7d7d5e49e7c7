//! Values packed into one flat value and cut back out: buffer copies, no shader. Programs pack
//! what they read back in one transfer (a step's statistics) and unpack what arrives as one.

use super::{Kernel, Prepared, TensorType, check, sharding_rules};
use crate::device::Recorder;
use crate::named_sharding::NamedSharding;
use crate::{DType, Result, Tensor};

/// Every input's words one after another, as one flat `dtype` value.
#[derive(Debug, Clone)]
pub struct Pack {
    pub dtype: DType,
}

impl Kernel for Pack {
    fn kind(&self) -> &'static str {
        "pack"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        if inputs.iter().any(|t| t.dtype.size() != 4) || self.dtype.size() != 4 {
            return Err(check::invalid(
                self.kind(),
                "packs 4-byte elements only".into(),
            ));
        }
        Ok(vec![TensorType::new(
            self.dtype,
            &[inputs.iter().map(TensorType::len).sum()],
        )])
    }
    fn shardings(&self, inputs: &[NamedSharding], _: &[TensorType]) -> sharding_rules::Rule {
        sharding_rules::pack(inputs)
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let o = check::output(y, 0)?;
        let mut at = 0;
        for t in x.iter().filter(|t| t.bytes() > 0) {
            rec.copy_buffer_to_buffer(t.buffer(), 0, o.buffer(), at, t.bytes());
            at += t.bytes();
        }
        Ok(())
    }
}

/// One flat value cut into values of `types` (4-byte elements).
#[derive(Debug, Clone)]
pub struct Unpack {
    pub types: Vec<TensorType>,
}

impl Kernel for Unpack {
    fn kind(&self) -> &'static str {
        "unpack"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 1)?;
        let total: usize = self.types.iter().map(TensorType::len).sum();
        if inputs[0].len() != total || self.types.iter().any(|t| t.dtype.size() != 4) {
            return Err(check::invalid(
                self.kind(),
                format!("{} into {total} words", inputs[0]),
            ));
        }
        Ok(self.types.clone())
    }
    fn shardings(&self, inputs: &[NamedSharding], outputs: &[TensorType]) -> sharding_rules::Rule {
        sharding_rules::unpack(inputs, outputs)
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let mut at = 0;
        for t in y.iter().filter(|t| t.bytes() > 0) {
            rec.copy_buffer_to_buffer(x[0].buffer(), at, t.buffer(), 0, t.bytes());
            at += t.bytes();
        }
        Ok(())
    }
}
