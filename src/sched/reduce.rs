//! The sum an all-reduce delivers, made once on the host from the members' staged shards: every
//! member already sends its shard through the host, so adding them there costs each device one
//! write of the result, not a write of every member's shard and a sum kernel. The sum runs in
//! member order from zero, `((0 + x₀) + x₁) + …`, element by element in the value's own type:
//! the same operations, so the same bits, as a device adding the shards in that order.

use crate::DType;
use half::f16;

/// The elementwise sum of `parts` (little-endian shards of `dtype`, equally long), in order.
pub(crate) fn sum_in_order(dtype: DType, parts: &[&[u8]]) -> Vec<u8> {
    let len = parts.first().map_or(0, |p| p.len());
    match dtype {
        DType::F32 => sum::<f32>(parts, len, 0.0, |a, b| a + b),
        DType::U32 => sum::<u32>(parts, len, 0, u32::wrapping_add),
        DType::F16 => sum::<f16>(parts, len, f16::ZERO, |a, b| a + b),
    }
}

fn sum<T: bytemuck::Pod>(parts: &[&[u8]], len: usize, zero: T, add: impl Fn(T, T) -> T) -> Vec<u8> {
    let mut acc = vec![zero; len / size_of::<T>()];
    for part in parts {
        let xs: Vec<T> = bytemuck::pod_collect_to_vec(part);
        for (a, &x) in acc.iter_mut().zip(&xs) {
            *a = add(*a, x);
        }
    }
    bytemuck::cast_slice(&acc).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_follow_member_order_in_the_values_type() {
        let a: Vec<f32> = vec![1e8, -0.0, 1.5];
        let b: Vec<f32> = vec![1.0, -0.0, 2.25];
        let c: Vec<f32> = vec![-1e8, 0.0, -4.0];
        let got = sum_in_order(
            DType::F32,
            &[
                bytemuck::cast_slice(&a),
                bytemuck::cast_slice(&b),
                bytemuck::cast_slice(&c),
            ],
        );
        let got: Vec<f32> = bytemuck::pod_collect_to_vec(&got);
        // In order: (1e8 + 1) rounds to 1e8, then 0: not the 1 another order would give.
        assert_eq!(got, [0.0, 0.0, -0.25]);
        assert!(got[1].is_sign_positive(), "0 + -0 + -0 + 0 is +0");
        let u: Vec<u32> = vec![u32::MAX, 3];
        let v: Vec<u32> = vec![2, 4];
        let got = sum_in_order(
            DType::U32,
            &[bytemuck::cast_slice(&u), bytemuck::cast_slice(&v)],
        );
        assert_eq!(bytemuck::pod_collect_to_vec::<u8, u32>(&got), [1, 7]);
        let h = [f16::from_f32(0.5), f16::from_f32(-2.0)];
        let got = sum_in_order(
            DType::F16,
            &[bytemuck::cast_slice(&h), bytemuck::cast_slice(&h)],
        );
        let got: Vec<f16> = bytemuck::pod_collect_to_vec(&got);
        assert_eq!(got, [f16::from_f32(1.0), f16::from_f32(-4.0)]);
    }
}
