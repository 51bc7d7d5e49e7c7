//! The builder's programs: one node per sharded computation, transfers where gangs cross, typed
//! kernel nodes, shardings, and the build errors of bad programs.

use super::*;
use crate::kernels::{Accumulate, Adam, Matmul, RowLogsumexp};

#[test]
fn one_node_per_sharded_computation_whatever_the_shard_count() {
    for shards in [1usize, 2, 8] {
        let gang: Vec<usize> = (0..shards).collect();
        let mut p = ProgramBuilder::new("chain");
        let x = p.arg(&gang, 16);
        let a = p.affine("A", &gang, x, 2.0, 0.0);
        let b = p.relu("B", &gang, a);
        p.result(b);
        assert_eq!(p.build().unwrap().nodes().len(), 4);
    }
}

#[test]
fn crossing_gangs_inserts_a_transfer() {
    let mut p = ProgramBuilder::new("fig4");
    let x = p.arg(&[0], 8);
    let a = p.affine("A", &[0], x, 1.0, 1.0);
    let b = p.affine("B", &[1], a, 1.0, 1.0);
    p.result(b);
    let prog = p.build().unwrap();
    let kinds: Vec<_> = prog.nodes().iter().map(|n| n.op.kind()).collect();
    assert_eq!(kinds, ["arg", "affine", "transfer", "affine", "result"]);
    assert_eq!(prog.node_devices(2), vec![0, 1]);
    assert_eq!(prog.devices_needed(), 2);
}

#[test]
fn bad_programs_are_errors() {
    let mut p = ProgramBuilder::new("bad");
    let x = p.arg(&[0, 1], 5);
    let y = p.all_to_all("a2a", x);
    p.result(y);
    assert!(p.build().unwrap_err().to_string().contains("equal chunks"));

    // A regroup's maps must cover the shard's rows, in chunks of whole rows.
    let identity = |rows: usize| Regroup {
        row_bytes: 8,
        send: Vec::new(),
        recv: (0..rows as u32).collect(),
        ragged: None,
    };
    for (len, regroup, fits) in [
        (8, identity(3), false),
        (6, identity(3), false),
        (8, identity(4), true),
    ] {
        let mut p = ProgramBuilder::new("bad regroup");
        let x = p.arg(&[0, 1], len);
        let y = p.all_to_all_regrouped("a2a", x, None, regroup);
        p.result(y);
        let built = p.build();
        assert_eq!(built.is_ok(), fits, "{len} values: {:?}", built.err());
    }

    // A ragged exchange needs its counts, from a plain all-to-all over its group that went
    // first, and counts need a ragged regroup.
    let ragged = Regroup {
        row_bytes: 8,
        ragged: Some(super::super::Ragged {
            block_rows: 1,
            record_words: 1,
            counts: super::super::CountsSide::Sent,
        }),
        ..Regroup::default()
    };
    let mut p = ProgramBuilder::new("ragged, no counts");
    let x = p.arg(&[0, 1], 8);
    let y = p.all_to_all_regrouped("a2a", x, None, ragged.clone());
    p.result(y);
    assert!(p.build().unwrap_err().to_string().contains("go together"));
    let mut p = ProgramBuilder::new("counts, not ragged");
    let x = p.arg(&[0, 1], 8);
    let c = p.typed_arg(&[0, 1], TensorType::u32(&[4]));
    let c = p.all_to_all("counts", c);
    let y = p.all_to_all_ragged("a2a", (x, c), None, Regroup::default());
    p.result(y);
    assert!(p.build().unwrap_err().to_string().contains("go together"));
    for from_exchange in [false, true] {
        let mut p = ProgramBuilder::new("ragged");
        let x = p.arg(&[0, 1], 8);
        let mut c = p.typed_arg(&[0, 1], TensorType::u32(&[4]));
        if from_exchange {
            c = p.all_to_all("counts", c);
        }
        let y = p.all_to_all_ragged("a2a", (x, c), None, ragged.clone());
        p.result(y);
        let built = p.build();
        assert_eq!(built.is_ok(), from_exchange, "{:?}", built.err());
        if let Err(e) = built {
            assert!(e.to_string().contains("plain all-to-all"), "{e}");
        }
    }

    let mut p = ProgramBuilder::new("bad");
    let x = p.arg(&[0, 1], 4);
    let _ = p.transfer(x, &[2]);
    p.result(x);
    assert!(p.build().is_err());

    let mut p = ProgramBuilder::new("dup");
    let x = p.arg(&[1, 1], 4);
    p.result(x);
    assert!(p.build().unwrap_err().to_string().contains("twice"));

    let mut p = ProgramBuilder::new("none");
    let _ = p.arg(&[0], 4);
    assert!(p.build().unwrap_err().to_string().contains("no results"));
}

#[test]
fn kernel_nodes_are_typed_and_bad_shapes_are_build_errors() {
    use crate::kernels::matmul::{MatmulVariant, VariantChoice};
    let matmul = || {
        Arc::new(Matmul {
            limits: None,
            trans_a: false,
            trans_b: true,
            offsets: None,
            choice: VariantChoice::SameSums(MatmulVariant::Tiled),
            f16_accumulate: false,
            epilogue: crate::kernels::Epilogue::NONE,
        })
    };
    let mut p = ProgramBuilder::new("typed");
    let a = p.typed_arg(&[0], TensorType::f32(&[3, 5]));
    let w = p.variable("w", &[0], TensorType::f32(&[7, 5]));
    let [c] = p.kernel("a·wᵀ", &[0], matmul(), &[a, w]);
    assert_eq!(p.ty(c), TensorType::f32(&[3, 7]));
    // An in-place update keeps its input's type.
    let [acc] = p.kernel("acc", &[0], Arc::new(Accumulate), &[c, c]);
    assert_eq!(p.ty(acc), p.ty(c));
    p.result(acc);
    let prog = p.build().unwrap();
    assert_eq!(prog.value(c).shard_bytes(), 3 * 7 * 4);

    let mut p = ProgramBuilder::new("bad");
    let a = p.typed_arg(&[0], TensorType::f32(&[3, 5]));
    let w = p.typed_arg(&[0], TensorType::f32(&[7, 4]));
    let [c] = p.kernel("a·wᵀ", &[0], matmul(), &[a, w]);
    p.result(c);
    let e = p.build().unwrap_err().to_string();
    assert!(e.contains("a·wᵀ"), "{e}");

    let mut p = ProgramBuilder::new("outputs");
    let a = p.typed_arg(&[0], TensorType::f32(&[3, 5]));
    let [_, _] = p.kernel("two of one", &[0], Arc::new(RowLogsumexp), &[a]);
    p.result(a);
    assert!(p.build().unwrap_err().to_string().contains("1 outputs"));
}

#[test]
fn a_value_updated_in_place_is_read_no_more() {
    let build = |read_stale: bool, as_result: bool| {
        let mut p = ProgramBuilder::new("in place");
        let x = p.typed_arg(&[0], TensorType::f32(&[4]));
        let g = p.relu("g", &[0], x);
        let [sum] = p.kernel("sum", &[0], Arc::new(Accumulate), &[g, x]);
        let read = if read_stale { g } else { sum };
        if as_result {
            p.result(read);
        } else {
            let y = p.relu("y", &[0], read);
            p.result(y);
        }
        p.build()
    };
    assert!(build(false, false).is_ok());
    assert!(build(false, true).is_ok());
    for as_result in [false, true] {
        let e = build(true, as_result).unwrap_err().to_string();
        assert!(e.contains("after sum updated it in place"), "{e}");
    }
}

#[test]
fn a_recv_takes_only_what_a_send_sent() {
    let mut p = ProgramBuilder::new("split transfer");
    let x = p.arg(&[0], 8);
    let sent = p.send("send", x);
    let got = p.recv("recv", sent, &[1]);
    p.result(got);
    let prog = p.build().unwrap();
    let kinds: Vec<_> = prog.nodes().iter().map(|n| n.op.kind()).collect();
    assert_eq!(kinds, ["arg", "send", "recv", "result"]);
    assert_eq!(prog.node_devices(2), vec![0, 1]);

    let mut p = ProgramBuilder::new("no send");
    let x = p.arg(&[0], 8);
    let got = p.recv("recv", x, &[1]);
    p.result(got);
    assert!(p.build().unwrap_err().to_string().contains("no send node"));
}

/// A matmul's output has its operands' float type; mixed or integer operands are build errors.
#[test]
fn matmul_nodes_keep_their_operands_float_type() {
    use crate::DType;
    use crate::kernels::matmul::{MatmulVariant, VariantChoice};
    let mm = Arc::new(Matmul {
        limits: None,
        trans_a: false,
        trans_b: false,
        offsets: None,
        choice: VariantChoice::SameSums(MatmulVariant::Tiled),
        f16_accumulate: false,
        epilogue: crate::kernels::Epilogue::NONE,
    });
    let f16 = |shape: &[usize]| TensorType::new(DType::F16, shape);
    let mut p = ProgramBuilder::new("f16 matmul");
    let a = p.variable("a", &[0], f16(&[5, 3]));
    let b = p.variable("b", &[0], f16(&[3, 7]));
    let [c] = p.kernel("a·b", &[0], mm.clone(), &[a, b]);
    assert_eq!(p.ty(c), f16(&[5, 7]));
    p.result(c);
    assert!(p.build().is_ok());
    for b in [TensorType::f32(&[3, 7]), TensorType::u32(&[3, 7])] {
        let mut p = ProgramBuilder::new("mixed matmul");
        let a = p.variable("a", &[0], f16(&[5, 3]));
        let b = p.variable("b", &[0], b);
        let [c] = p.kernel("a·b", &[0], mm.clone(), &[a, b]);
        p.result(c);
        let e = p.build().unwrap_err().to_string();
        assert!(e.contains("needs two f32 or two f16 operands"), "{e}");
    }
}

/// A data-parallel linear layer's step: its weight gradient is a partial sum over the data
/// axis until an all-reduce, and an optimizer fed the partial sum is a build error.
#[test]
fn shardings_follow_the_kernels_and_catch_a_missing_all_reduce() {
    use crate::kernels::matmul::{MatmulVariant, VariantChoice};
    use crate::kernels::optim::AdamConfig;
    let mm = |trans_a| {
        Arc::new(Matmul {
            limits: None,
            trans_a,
            trans_b: false,
            offsets: None,
            choice: VariantChoice::SameSums(MatmulVariant::Tiled),
            f16_accumulate: false,
            epilogue: crate::kernels::Epilogue::NONE,
        })
    };
    for all_reduce in [true, false] {
        let mut p = ProgramBuilder::new("dp linear");
        let gang = p.mesh(&[0, 1, 2, 3], &[("data", 4)]);
        let x = p.typed_arg(&gang, TensorType::f32(&[8, 3]));
        let dy = p.typed_arg(&gang, TensorType::f32(&[8, 5]));
        let w = p.variable("w", &gang, TensorType::f32(&[3, 5]));
        let m = p.variable("m", &gang, TensorType::f32(&[3, 5]));
        let v = p.variable("v", &gang, TensorType::f32(&[3, 5]));
        let bias = p.spec(&gang, &[&[]], &[]);
        let bias = p.sharded_arg(&gang, TensorType::f32(&[2]), bias);
        let [y] = p.kernel("x·w", &gang, mm(false), &[x, w]);
        assert_eq!(p.sharding(y).to_string(), "P(data, -) over {data=4}");
        assert_eq!(p.sharding(y).global_shape(&[8, 5]), [32, 5]);
        let [g] = p.kernel("xᵀ·dy", &gang, mm(true), &[x, dy]);
        assert_eq!(
            p.sharding(g).to_string(),
            "P(-, -) over {data=4}, partial over data"
        );
        let g = if all_reduce {
            p.all_reduce("sum", g)
        } else {
            g
        };
        let adam = Arc::new(Adam::new(AdamConfig::new(1e-3)));
        let [_, _, _] = p.kernel("adam", &gang, adam, &[w, m, v, g, bias]);
        p.result(y);
        match p.build() {
            Ok(_) => assert!(all_reduce),
            Err(e) => {
                assert!(!all_reduce, "{e}");
                assert!(e.to_string().contains("adam: updates P(-, -)"), "{e}");
            }
        }
    }
}

#[test]
fn layouts_that_would_compute_something_else_are_build_errors() {
    let devices = [0, 1, 2, 3];
    let gang = Gang::new(devices, &[("data", 2), ("expert", 2)]).unwrap();
    let fresh = || ProgramBuilder::new("2-d");
    // Summing blocks over one axis leaves them split over the other.
    let mut p = fresh();
    let x = p.arg(&gang, 8);
    let r = p.all_reduce_over("sum", x, "data");
    assert_eq!(
        p.sharding(r).to_string(),
        "P(expert) over {data=2, expert=2}"
    );
    // A relu of partial sums.
    let mut p = fresh();
    let laid = p.spec(&gang, &[&[]], &["data"]);
    let x = p.sharded_arg(&gang, TensorType::f32(&[8]), laid);
    let r = p.relu("relu", &gang, x);
    p.result(r);
    assert!(p.build().unwrap_err().to_string().contains("nonlinear"));
    // Adding values laid out differently.
    let mut p = fresh();
    let x = p.arg(&gang, 8);
    let laid = p.spec(&gang, &[&["expert"]], &[]);
    let z = p.sharded_arg(&gang, TensorType::f32(&[8]), laid);
    let r = p.add("add", &gang, x, z);
    p.result(r);
    assert!(
        p.build()
            .unwrap_err()
            .to_string()
            .contains("laid out differently")
    );
    // A collective over an axis the gang does not have.
    let mut p = fresh();
    let x = p.arg(&gang, 8);
    let r = p.all_to_all_over("a2a", x, "pipe");
    p.result(r);
    let e = p.build().unwrap_err().to_string();
    assert!(e.contains("no axis \"pipe\""), "{e}");
    // The same devices under two layouts: a value of the 2-d gang read on them as one axis.
    let mut p = fresh();
    let x = p.arg(&gang, 8);
    let r = p.relu("relu", &devices, x);
    p.result(r);
    let e = p.build().unwrap_err().to_string();
    assert!(e.contains("one gang, two layouts"), "{e}");
    // Axes that do not fit the gang.
    let mut p = fresh();
    let bad = p.mesh(&devices, &[("x", 3)]);
    assert_eq!(bad.shape().to_string(), "{d=4}");
    let x = p.arg(&bad, 8);
    p.result(x);
    let e = p.build().unwrap_err().to_string();
    assert!(e.contains("gang [0, 1, 2, 3]"), "{e}");
}
