//! Generation: deterministic and checked on the host, the key/value cache against the full
//! forward, and the device against the host reference.

use super::*;

pub(super) fn generation_is_deterministic_and_checked() {
    let cfg = tiny(false, 1);
    let ck = TransformerCheckpoint {
        params: params(cfg),
        train: None,
    };
    let greedy = Sampling::GREEDY;
    let a = generate(&ck, b"the cat", 12, greedy, 1).unwrap();
    let b = generate(&ck, b"the cat", 12, greedy, 2).unwrap();
    assert_eq!(a, b, "temperature 0 takes the argmax whatever the seed");
    assert_eq!(a.len(), 12);
    let warm = Sampling::temperature(1.0);
    let c = generate(&ck, b"", 30, warm, 3).unwrap();
    assert_eq!(c, generate(&ck, b"", 30, warm, 3).unwrap());
    for bad in [
        Sampling::temperature(f32::NAN),
        Sampling::temperature(-1.0),
        Sampling {
            top_k: Some(0),
            ..warm
        },
        Sampling {
            top_p: Some(0.0),
            ..warm
        },
        Sampling {
            top_p: Some(1.5),
            ..warm
        },
    ] {
        assert!(generate(&ck, b"x", 3, bad, 0).is_err(), "{bad:?}");
    }
    // Top-k 1, or a top-p below any one byte's probability, is the argmax at any temperature.
    let hot = Sampling::temperature(5.0);
    for narrow in [
        Sampling {
            top_k: Some(1),
            ..hot
        },
        Sampling {
            top_p: Some(1e-6),
            ..hot
        },
    ] {
        assert_eq!(
            generate(&ck, b"the cat", 12, narrow, 9).unwrap(),
            a,
            "{narrow:?}"
        );
    }
    // Top-k 3 at a high temperature draws each byte among the three most likely there.
    let top3 = Sampling {
        top_k: Some(3),
        ..hot
    };
    let drawn = generate(&ck, b"the cat", 16, top3, 4).unwrap();
    let mut text: Vec<u32> = b"the cat".iter().map(|&x| u32::from(x)).collect();
    // Generation routes dropless.
    let routed = dropless(&ck.params);
    for &byte in &drawn {
        let window = &text[text.len().saturating_sub(cfg.context)..];
        let all = logits(&routed, window).unwrap();
        let row = &all[(window.len() - 1) * 256..];
        let mut order: Vec<usize> = (0..256).collect();
        order.sort_by(|&x, &y| row[y].total_cmp(&row[x]).then(x.cmp(&y)));
        assert!(
            order[..3].contains(&usize::from(byte)),
            "{byte} not in {:?}",
            &order[..3]
        );
        text.push(u32::from(byte));
    }
    // Samples: sample 0 is the single draw with the seed, sample i the draw with seed + i.
    let many = generate_samples(&ck, b"", 30, warm, 3, 3).unwrap();
    assert_eq!(many.len(), 3);
    assert_eq!(many[0], c);
    assert_eq!(many[2], generate(&ck, b"", 30, warm, 5).unwrap());
    assert!(generate_samples(&ck, b"", 3, warm, 0, 0).is_err());
    assert!(logits(&ck.params, &[]).is_err());
    assert!(logits(&ck.params, &vec![1; cfg.context + 1]).is_err());
    assert!(logits(&ck.params, &[300]).is_err());
}

/// `params` routed as generation routes: an expert layer's capacity factor `E/K`.
fn dropless(params: &TransformerParams) -> TransformerParams {
    let c = params.config;
    TransformerParams {
        config: TransformerConfig {
            capacity_factor: c.experts as f32 / c.top_k as f32,
            ..c
        },
        tensors: params.tensors.clone(),
    }
}

/// The models generation is checked on: dense, top-1 MoE with an untied head, top-2 MoE tied.
fn generation_models() -> Vec<TransformerParams> {
    let dense = TransformerConfig {
        moe_every: 0,
        ..tiny(false, 1)
    };
    [dense, tiny(false, 1), tiny(true, 2)]
        .into_iter()
        .map(params)
        .collect()
}

/// Logits within 1e-5 (relative to the larger of 1 and the value).
fn assert_logits_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{what}: logit {i}: {g} vs {w}"
        );
    }
}

/// At every position, the logits a cache gives (a whole prefill, byte by byte, or a prefill of
/// two then byte by byte) are the reference's full forward's, within 1e-5; two sequences are
/// decoded together; bad calls are errors.
pub(super) fn the_cache_gives_the_full_forwards_logits(device: &Device) {
    let (runtime, client) = common::runtime_client(std::slice::from_ref(device), "test");
    let mesh_device = &runtime.mesh()[0];
    for p in generation_models() {
        let t = p.config.context;
        let seqs: [Vec<u32>; 2] = [
            b"hello".iter().map(|&b| u32::from(b)).collect(),
            vec![0, 255, 7, 7, 128],
        ];
        let want: Vec<Vec<f32>> = seqs
            .iter()
            .map(|s| logits(&dropless(&p), s).unwrap())
            .collect();
        let what = format!("moe_every {}, top {}", p.config.moe_every, p.config.top_k);
        for first in [t, 1, 2] {
            let mut dec = Decoder::new(&client, mesh_device, &p, 2).unwrap();
            let ids: Vec<u32> = seqs.iter().flat_map(|s| s[..first].to_vec()).collect();
            let got = dec.extend(&ids, 0).unwrap();
            for (b, w) in want.iter().enumerate() {
                let rows = &got[b * first * VOCAB..(b + 1) * first * VOCAB];
                assert_logits_close(
                    &format!("{what}: prefill {first}"),
                    rows,
                    &w[..first * VOCAB],
                );
            }
            for pos in first..t {
                let ids = [seqs[0][pos], seqs[1][pos]];
                let got = dec.extend(&ids, pos).unwrap();
                for (b, w) in want.iter().enumerate() {
                    let row = &got[b * VOCAB..(b + 1) * VOCAB];
                    let at = format!("{what}: after {first}, position {pos}");
                    assert_logits_close(&at, row, &w[pos * VOCAB..(pos + 1) * VOCAB]);
                }
            }
            assert!(dec.extend(&[1, 2], t).is_err(), "past the context");
            assert!(dec.extend(&[1, 2], 1).is_ok(), "rewriting positions 1..");
            assert!(
                dec.extend(&[1, 2], 3).is_err(),
                "a gap: only 0..2 are cached now"
            );
            assert!(dec.extend(&[1, 2, 3], 0).is_err(), "not a whole batch");
            assert!(dec.extend(&[1, 300], 0).is_err(), "not a byte");
        }
    }
    assert!(Decoder::new(&client, mesh_device, &generation_models()[0], 0).is_err());
}

/// Generation on the device draws the host reference's bytes: greedy, from an empty prompt (the
/// cache, then sliding past the context) and a prompt longer than the context, several samples
/// decoded together (the host draws each alone: a sample does not depend on its batch, as
/// dropless routing promises); sampled with top-k and top-p, sample by sample.
pub(super) fn generation_on_the_device_follows_the_host_reference(device: &Device) {
    let (runtime, client) = common::runtime_client(std::slice::from_ref(device), "test");
    let mesh_device = &runtime.mesh()[0];
    let drawn = Sampling {
        temperature: 0.9,
        top_k: Some(20),
        top_p: Some(0.95),
    };
    for p in generation_models() {
        let ck = TransformerCheckpoint {
            params: p,
            train: None,
        };
        for (prompt, sampling, samples) in [
            (&b""[..], Sampling::GREEDY, 1),
            (b"the cat", Sampling::GREEDY, 3),
            (b"a", drawn, 4),
        ] {
            let what = format!("{:?} {sampling:?} x{samples}", std::str::from_utf8(prompt));
            let host = generate_samples(&ck, prompt, 12, sampling, 5, samples).unwrap();
            let gpu = generate_on(
                (&client, mesh_device),
                &ck,
                prompt,
                12,
                sampling,
                5,
                samples,
            );
            assert_eq!(gpu.unwrap(), host, "{what}");
        }
    }
}
