//! Branch-Train-Merge: the branch phase trains one ELM per domain on its own device with no
//! transfers between devices (checked from the trace), and the merges evaluate.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, case};
use gangway::btm::experiment::{BtmModels, BtmOptions, evaluate};
use gangway::btm::{EnsembleOptions, average, branch};
use gangway::data::Corpus;
use gangway::moe::{MoeLmConfig, MoeLmParams};
use gangway::sched::{Runtime, RuntimeOptions};
use gangway::trace::{EventKind, Tracer};
use gangway::train::{TrainOptions, train};

fn tiny() -> MoeLmConfig {
    MoeLmConfig {
        context: 4,
        embed: 4,
        model: 16,
        hidden: 16,
        experts: 2,
        top_k: 1,
        blocks: 1,
        ..MoeLmConfig::default()
    }
}

fn opts(steps: u32) -> TrainOptions {
    TrainOptions {
        steps,
        batch: 32,
        eval_units: 64,
        ..TrainOptions::default()
    }
}

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(adapters: branches_train_without_transfers_and_merge),
    ])
}

/// Two virtual devices of the adapter, one per domain.
fn branches_train_without_transfers_and_merge(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let devices = &devices[..2];
    let domains: Vec<(String, Corpus)> = ["prose", "code"]
        .iter()
        .map(|d| (d.to_string(), Corpus::bundled(d).unwrap()))
        .collect();
    let all = Corpus::from_documents(
        domains
            .iter()
            .flat_map(|(_, c)| c.documents().to_vec())
            .collect(),
    );
    let init = MoeLmParams::init(tiny()).unwrap();
    let tracer = Tracer::new();
    let runtime = Runtime::new(
        devices.to_vec(),
        RuntimeOptions {
            tracer: tracer.clone(),
            ..RuntimeOptions::default()
        },
    )
    .unwrap();
    let client = runtime.client("seed", 1);
    let seed = train(
        &client,
        &gangway::Mesh::line(&devices[..1]),
        &all,
        &init,
        &opts(5),
        |_| {},
    )
    .unwrap()
    .params;

    drop(tracer.take_events());
    let elms = branch(
        &runtime,
        &gangway::Mesh::line(devices),
        &domains,
        &seed,
        &opts(6),
        |_, _| {},
    )
    .unwrap();
    let events = tracer.take_events();
    assert!(!events.is_empty(), "the branch phase was traced");
    // Batches go up and statistics come back (host transfers), but nothing moves between
    // devices: no flows, no collectives.
    assert!(
        events.iter().any(|e| e.kind == EventKind::Kernel),
        "the kernels of the branch phase are events"
    );
    assert!(
        events.iter().all(|e| e.flow.is_none()
            && !e.name.contains("all-to-all")
            && !e.name.contains("all-reduce")),
        "no transfers between devices during the branch phase"
    );
    // ELM i trains on devices[i] alone: events come from exactly those two devices.
    let seen: std::collections::BTreeSet<usize> = events.iter().map(|e| e.device).collect();
    let want: std::collections::BTreeSet<usize> = devices.iter().map(|d| d.id()).collect();
    assert_eq!(seen, want, "each ELM ran on its own device");
    assert_eq!(elms.len(), 2);
    assert_eq!(elms[0].domain, "prose");
    assert_ne!(elms[0].params, elms[1].params);
    assert_ne!(elms[0].params, seed);

    // A new domain branches from the averaged ELMs.
    let averaged = average(&[&elms[0].params, &elms[1].params], None).unwrap();
    let persian = vec![("persian".to_string(), Corpus::bundled("persian").unwrap())];
    let new = branch(
        &runtime,
        &gangway::Mesh::line(&devices[..1]),
        &persian,
        &averaged,
        &opts(3),
        |_, _| {},
    )
    .unwrap();
    assert_eq!(new[0].domain, "persian");

    let models = BtmModels {
        seed: seed.clone(),
        random_elms: elms.clone(),
        elms,
        dense: seed,
        branch_seconds: 0.0,
    };
    let eval_opts = BtmOptions {
        seed_steps: 0,
        branch_steps: 0,
        train: opts(0),
        eval_windows_per_doc: 4,
        ensemble: EnsembleOptions::default(),
        split_seed: 7,
    };
    let scores = evaluate(&client, &devices[0], &all, &models, &eval_opts).unwrap();
    assert_eq!(scores.len(), 2);
    for s in &scores {
        for v in [
            s.dense,
            s.own_elm,
            s.ensemble,
            s.averaged,
            s.random_split_ensemble,
        ] {
            assert!(v.is_finite() && v > 0.0 && v < 12.0, "{s:?}");
        }
        assert!((s.prior.iter().sum::<f64>() - 1.0).abs() < 1e-6);
    }
}
