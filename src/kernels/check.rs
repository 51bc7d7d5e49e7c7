//! What every kernel checks, in one place: the number of inputs, 2-d shapes, dtypes, devices, the
//! output buffers a program handed it, and sizes that must fit a shader's u32. Shared by the
//! [`super::Kernel`] implementations beside each shader; a routing's buffers are checked beside
//! the router (`router::routing_dims`), which builds on these.

use super::TensorType;
use crate::{Device, Error, Result, Tensor};

pub(crate) fn invalid(what: &'static str, reason: String) -> Error {
    Error::InvalidArgument { what, reason }
}

/// `v` as a shader's u32, or an error naming `what`.
pub(crate) fn to_u32(what: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| invalid(what, format!("{v} does not fit in u32")))
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
        _ => Err(Error::ShapeMismatch {
            what,
            expected: "a 2-d tensor".into(),
            got: format!("{t}"),
        }),
    }
}

/// The rows and columns of a 2-d tensor.
pub(crate) fn dims2(what: &'static str, t: &Tensor) -> Result<(usize, usize)> {
    rows_cols(what, &TensorType::new(t.dtype(), t.shape()))
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
    device: &Device,
    dtype: crate::DType,
    shape: &[usize],
) -> Result<()> {
    t.expect_device(what, device)?;
    t.expect_dtype(what, dtype)?;
    t.expect_shape(what, shape)
}

/// Output `i` of those a program handed a kernel.
pub(crate) fn output(outputs: &[Tensor], i: usize) -> Result<&Tensor> {
    outputs
        .get(i)
        .ok_or_else(|| invalid("kernel node", format!("no output {i}")))
}
