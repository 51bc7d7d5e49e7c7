// GELU, tanh form (GPT-2, BERT; PyTorch's approximate="tanh"), and its derivative: shared by
// elementwise.wgsl's gelu and gelu_backward and the matmul epilogue that takes GELU's backward
// (matmul_common.wgsl), so both compute the same bits.

const SQRT_2_OVER_PI: f32 = 0.7978845608;

// tanh through exp, bounded so that exp cannot overflow (|u| > 10 is ±1 to f32 precision).
fn tanh_bounded(u: f32) -> f32 {
    let e = exp(-2.0 * clamp(u, -10.0, 10.0));
    return (1.0 - e) / (1.0 + e);
}

fn gelu_of(v: f32) -> f32 {
    let t = tanh_bounded(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v));
    return 0.5 * v * (1.0 + t);
}

// d gelu(v) / dv.
fn gelu_grad(v: f32) -> f32 {
    let t = tanh_bounded(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v));
    return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * v * v);
}
