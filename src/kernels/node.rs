//! What every kernel checks when a program asks for its outputs or prepares it: the number of
//! inputs, 2-d shapes, and the output buffers it was handed. Shared by the [`super::Kernel`]
//! implementations beside each shader's launcher.

use super::TensorType;
use crate::{Error, Result, Tensor};

pub(crate) fn invalid(what: &'static str, reason: String) -> Error {
    Error::InvalidArgument { what, reason }
}

/// `inputs` has exactly `n` values.
pub(crate) fn arity(what: &'static str, inputs: &[TensorType], n: usize) -> Result<()> {
    if inputs.len() == n {
        Ok(())
    } else {
        Err(invalid(
            what,
            format!("takes {n} inputs, got {}", inputs.len()),
        ))
    }
}

/// The rows and columns of a 2-d value.
pub(crate) fn rows_cols(what: &'static str, t: &TensorType) -> Result<(usize, usize)> {
    match *t.shape.as_slice() {
        [r, c] => Ok((r, c)),
        _ => Err(invalid(what, format!("needs a 2-d value, got {t}"))),
    }
}

/// `t` is `want`: a typed error naming what differs, the dtype first.
pub(crate) fn expect_type(what: &'static str, t: &TensorType, want: &TensorType) -> Result<()> {
    if t.dtype != want.dtype {
        return Err(Error::DTypeMismatch {
            what,
            expected: want.dtype,
            got: t.dtype,
        });
    }
    if t.shape != want.shape {
        return Err(Error::ShapeMismatch {
            what,
            expected: format!("{want}"),
            got: format!("{t}"),
        });
    }
    Ok(())
}

/// Checks that `t` is on `device`, has `dtype` and the given shape (a launcher's inputs and
/// outputs).
pub(crate) fn expect(
    what: &'static str,
    t: &Tensor,
    device: &crate::Device,
    dtype: crate::DType,
    shape: &[usize],
) -> Result<()> {
    t.expect_device(what, device)?;
    t.expect_dtype(what, dtype)?;
    t.expect_shape(what, shape)
}

pub(crate) fn output(outputs: &[Tensor], i: usize) -> Result<&Tensor> {
    outputs
        .get(i)
        .ok_or_else(|| invalid("kernel node", format!("no output {i}")))
}
