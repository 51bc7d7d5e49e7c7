//! Running kernels now, outside any program: the one place in `kernels` that blocks on the GPU.
//! No kernel module blocks; the tests, the benches and the autotuner come here, and [`run`] runs
//! the same [`Kernel`] objects that program nodes hold, so what a test checks is what a program
//! runs. [`gpu_seconds`] times recorded commands on the device's own clock, with
//! the timestamp writes the runtime's traced kernels use.

use super::{Kernel, Prepared, TensorType};
use crate::{Device, Error, Result, Tensor};

/// Records into a fresh encoder on `device`, submits it and waits until the GPU is done.
pub fn submit_and_wait<R>(
    device: &Device,
    what: &str,
    record: impl FnOnce(&mut wgpu::CommandEncoder) -> Result<R>,
) -> Result<R> {
    let mut encoder = device.encoder(what);
    let out = record(&mut encoder)?;
    device.submit(encoder);
    device.wait()?;
    Ok(out)
}

/// Runs `prepared`'s commands once, with a timestamp at the start of the first dispatch and at
/// the end of the last, and returns the GPU seconds between them: the device's clock, without
/// the host's recording, submit and wait. `None` where the device has no timestamp queries, or
/// its clock did not advance (then time on the host).
pub fn gpu_seconds(device: &Device, what: &str, prepared: &Prepared) -> Result<Option<f64>> {
    let Some(queries) = device.timestamp_queries(what, 2) else {
        return Ok(None);
    };
    let resolve = device.query_resolve_buffer(what, wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT);
    submit_and_wait(device, what, |encoder| {
        prepared.encode(encoder, Some((&queries, 0)));
        encoder.resolve_query_set(&queries, 0..2, &resolve, 0);
        Ok(())
    })?;
    let ticks: [u64; 2] = bytemuck::pod_read_unaligned(&device.read_buffer(&resolve, 0, 16)?);
    let period_ns = f64::from(device.queue().get_timestamp_period());
    Ok((ticks[1] > ticks[0]).then(|| (ticks[1] - ticks[0]) as f64 * period_ns * 1e-9))
}

/// [`run`] for a kernel with one output.
pub fn run_one(kernel: &dyn Kernel, inputs: &[&Tensor]) -> Result<Tensor> {
    run(kernel, inputs)?
        .into_iter()
        .next()
        .ok_or_else(|| Error::InvalidArgument {
            what: "kernel",
            reason: format!("{} produced no output", kernel.kind()),
        })
}

/// [`run`] for a kernel with `N` outputs, as an array.
pub fn run_n<const N: usize>(kernel: &dyn Kernel, inputs: &[&Tensor]) -> Result<[Tensor; N]> {
    run(kernel, inputs)?
        .try_into()
        .map_err(|outs: Vec<Tensor>| Error::InvalidArgument {
            what: "kernel",
            reason: format!("{} produced {} outputs, not {N}", kernel.kind(), outs.len()),
        })
}

/// Runs `kernel` on `inputs` (all on one device) and returns its outputs: new tensors of the
/// types [`Kernel::outputs`] gives, except in-place outputs, which are their inputs (updated).
pub fn run(kernel: &dyn Kernel, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    let device =
        inputs
            .first()
            .map(|t| t.device().clone())
            .ok_or_else(|| Error::InvalidArgument {
                what: "kernel",
                reason: format!("{} was given no inputs", kernel.kind()),
            })?;
    for t in inputs {
        t.expect_device(kernel.kind(), &device)?;
    }
    let types: Vec<_> = inputs
        .iter()
        .map(|t| TensorType::new(t.dtype(), t.shape()))
        .collect();
    let in_place = kernel.in_place();
    let outputs = kernel
        .outputs(&types)?
        .iter()
        .enumerate()
        .map(|(i, ty)| match in_place.iter().find(|(o, _)| *o == i) {
            Some(&(_, input)) => Ok(inputs[input].clone()),
            None => Tensor::zeros(&device, &ty.shape, ty.dtype),
        })
        .collect::<Result<Vec<_>>>()?;
    let owned: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
    let mut prepared = Prepared::new();
    kernel.prepare(&owned, &outputs, &mut prepared)?;
    submit_and_wait(&device, kernel.kind(), |encoder| {
        prepared.encode(encoder, None);
        Ok(())
    })?;
    Ok(outputs)
}
