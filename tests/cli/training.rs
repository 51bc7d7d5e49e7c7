//! The training commands end to end: `train moe` and the Transformer's `train lm`, `generate`,
//! `eval lm`, `export` and `import`, with their checkpoints, reports and damaged files.

use super::*;

pub(super) fn train_moe_reports_bits_per_byte_and_resumes_from_its_checkpoint(_: &Adapters) {
    let dir = std::env::temp_dir().join(format!("gangway-cli-moe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ckpt = dir.join("moe.ckpt");
    let tiny = [
        "--batch",
        "32",
        "--context",
        "4",
        "--embed",
        "4",
        "--model",
        "16",
        "--hidden",
        "16",
        "--experts",
        "2",
        "--top-k",
        "1",
    ];
    let json = dir.join("report.json");
    let mut first = vec![
        "train",
        "moe",
        "--steps",
        "3",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ];
    first.extend(tiny);
    let out = gangway(&first);
    assert!(out.contains("3 steps (to step 3), 96 tokens"), "{out}");
    assert!(out.contains("bits per byte; unigram byte model"), "{out}");
    assert!(
        out.contains("spread of kept tokens over the experts (cv)"),
        "{out}"
    );
    // Imbalance per step in the report, and its means.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in ["dropped_fractions", "expert_cvs"] {
        let per_step = report[key].as_array().unwrap();
        assert_eq!(per_step.len(), 3, "{key}: {report}");
        assert!(
            per_step.iter().all(|v| v.as_f64().unwrap() >= 0.0),
            "{report}"
        );
    }
    let cvs: Vec<f64> = report["expert_cvs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let mean = report["mean_expert_cv"].as_f64().unwrap();
    assert!(
        (mean - cvs.iter().sum::<f64>() / 3.0).abs() < 1e-12,
        "{report}"
    );
    let mut again = vec![
        "train",
        "moe",
        "--steps",
        "2",
        "--resume",
        ckpt.to_str().unwrap(),
    ];
    again.extend(tiny);
    let out = gangway(&again);
    assert!(out.contains("2 steps (to step 5), 64 tokens"), "{out}");
    // Fine-tuning (issue 42): the checkpoint's weights with fresh optimizer state start below a
    // fresh model's first loss; --init and --resume together are refused.
    let fresh_first = report["losses"][0].as_f64().unwrap();
    let mut tune = vec![
        "train",
        "moe",
        "--steps",
        "2",
        "--init",
        ckpt.to_str().unwrap(),
    ];
    tune.extend(["--json", json.to_str().unwrap()]);
    tune.extend(tiny);
    let out = gangway(&tune);
    assert!(out.contains("2 steps (to step 2), 64 tokens"), "{out}");
    let tuned_first = report_losses(&json)[0];
    assert!(
        tuned_first < fresh_first,
        "{tuned_first} against {fresh_first}"
    );
    let both = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["train", "moe", "--init", ckpt.to_str().unwrap()])
        .args(["--resume", ckpt.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&both.stderr);
    assert!(
        !both.status.success() && err.contains("cannot be used with"),
        "{err}"
    );
    // Groups dealt unevenly over two devices, as given and as measured.
    for (balance, want) in [
        ("3,1", "groups per device: 3,1\n"),
        ("measured", "for speeds"),
    ] {
        let mut dealt = vec![
            "--virtual-devices",
            "2",
            "train",
            "moe",
            "--steps",
            "2",
            "--devices",
            "2",
            "--groups",
            "4",
            "--balance",
            balance,
        ];
        dealt.extend(tiny);
        let out = gangway(&dealt);
        assert!(out.contains(want), "{out}");
        assert!(out.contains("2 steps (to step 2), 64 tokens"), "{out}");
    }
    for (balance, says) in [
        ("3,0", "at least one routing group"),
        (
            "3,3",
            "a split of 6 groups over 2 devices for a trainer of 4",
        ),
        ("fast", "is not `even`, `measured`"),
    ] {
        let bad = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["--virtual-devices", "2", "train", "moe", "--steps", "1"])
            .args(["--devices", "2", "--groups", "4", "--balance", balance])
            .args(tiny)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(
            !bad.status.success() && err.contains(says) && !err.contains("panicked"),
            "{balance}: {err}"
        );
    }
    std::fs::write(&ckpt, b"not a checkpoint").unwrap();
    let bad = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["train", "moe", "--resume", ckpt.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("checkpoint") && !err.contains("panicked"),
        "{err}"
    );
}

/// The Transformer's commands end to end: a run with a checkpoint and a JSON report, a resumed
/// run, text from the model, its loss on a file, and its weights out and back in; damaged files
/// are one-line errors.
pub(super) fn train_lm_then_generate_eval_export_and_import(_: &Adapters) {
    let dir = scratch_dir("lm");
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (ckpt, json, weights, back) = (
        path("lm.safetensors"),
        path("report.json"),
        path("weights.safetensors"),
        path("back.safetensors"),
    );
    let tiny = [
        "--context",
        "16",
        "--d-model",
        "16",
        "--heads",
        "2",
        "--hidden",
        "32",
        "--experts",
        "2",
        "--batch",
        "4",
        "--eval-sequences",
        "8",
    ];
    let mut first = vec![
        "train",
        "lm",
        "--steps",
        "3",
        "--checkpoint",
        &ckpt,
        "--json",
        &json,
    ];
    first.extend(tiny);
    let out = gangway(&first);
    assert!(out.contains("3 steps (to step 3), 192 tokens"), "{out}");
    assert!(out.contains("bits per byte; unigram byte model"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["losses"].as_array().unwrap().len(), 3, "{report}");
    assert_eq!(report["config"]["moe_every"], 2, "{report}");
    let fresh_first = report["losses"][0].as_f64().unwrap();
    // Validation may route with its own capacity (`--eval-capacity`, as `eval lm` takes it):
    // dropless drops nothing there, and training itself is the same, loss for loss.
    let json_dropless = path("dropless-eval.json");
    let mut eval_dropless = vec!["train", "lm", "--steps", "3", "--json", &json_dropless];
    eval_dropless.extend(["--eval-capacity", "dropless"]);
    eval_dropless.extend(tiny);
    gangway(&eval_dropless);
    let other: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_dropless).unwrap()).unwrap();
    assert_eq!(other["losses"], report["losses"], "{other}");
    assert_eq!(other["valid_dropped_fraction"], 0.0, "{other}");
    assert!(
        report["valid_dropped_fraction"].as_f64().is_some(),
        "{report}"
    );
    // `dropless` is a capacity factor of E/K: here 2 experts, top-1.
    let mut dropless = vec![
        "train",
        "lm",
        "--steps",
        "2",
        "--capacity-factor",
        "dropless",
    ];
    dropless.extend(["--json", &json]);
    dropless.extend(tiny);
    gangway(&dropless);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["config"]["capacity_factor"], 2.0, "{report}");
    let dropped = report["dropped_fractions"].as_array().unwrap();
    assert!(dropped.iter().all(|d| d == 0.0), "{report}");
    for bad in ["0", "-1", "lots", "inf"] {
        let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["train", "lm", &format!("--capacity-factor={bad}")])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: {err}");
        assert!(
            err.contains("a positive number or `dropless`"),
            "{bad}: {err}"
        );
    }
    let mut again = vec!["train", "lm", "--steps", "2", "--resume", &ckpt];
    again.extend(tiny);
    let out = gangway(&again);
    assert!(out.contains("2 steps (to step 5)"), "{out}");

    let drawn = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "--checkpoint",
            &ckpt,
            "--prompt",
            "The ",
            "--max-bytes",
            "20",
        ];
        args.extend_from_slice(extra);
        gangway(&args)
    };
    let text = drawn(&["--temperature", "0"]);
    assert!(text.starts_with("The "), "{text}");
    // Several samples, each under its own line; top-k 1 is the greedy text whatever the seed.
    let three = drawn(&["--samples", "3", "--top-p", "0.9", "--seed", "7"]);
    assert_eq!(
        three.lines().filter(|l| l.starts_with("[sample ")).count(),
        3,
        "{three}"
    );
    assert_eq!(
        drawn(&["--top-k", "1", "--temperature", "2", "--seed", "3"]),
        text
    );
    let err = gangway_fails(&["generate", "--checkpoint", &ckpt, "--top-p", "1.5"]);
    assert!(err.contains("top-p must be in (0, 1]"), "{err}");
    let eval = gangway(&[
        "eval",
        "lm",
        "--checkpoint",
        &ckpt,
        "--file",
        &fixture_path("README.md"),
        "--json",
    ]);
    let eval: serde_json::Value = serde_json::from_str(&eval).unwrap();
    let bpb = eval["bits_per_byte"].as_f64().unwrap();
    assert!(bpb > 0.0 && bpb < 12.0, "{eval}");
    // Issue 42: every sequence is scored, the last partial batch included (10 sequences of 16
    // bytes in batches of 4), and the report says how many and how many bytes.
    let ten = path("ten.txt");
    let text: Vec<u8> = (0..16 * 10 + 1).map(|i| b"gangway runs "[i % 13]).collect();
    std::fs::write(&ten, text).unwrap();
    let eval_ten = |more: &[&str]| {
        let mut args = vec!["eval", "lm", "--checkpoint", &ckpt, "--file", &ten];
        args.extend(more);
        gangway(&args)
    };
    let all: serde_json::Value =
        serde_json::from_str(&eval_ten(&["--batch", "4", "--json"])).unwrap();
    assert_eq!(all["sequences"].as_u64(), Some(10), "{all}");
    assert_eq!(all["sequences_scored"].as_u64(), Some(10), "{all}");
    assert_eq!(all["bytes_scored"].as_u64(), Some(160), "{all}");
    // Dropless evaluation (E/K = 2 here) does not depend on the batch, each batch being a
    // routing group: the same bits at 1 and 4 sequences a batch.
    let dropless = |batch: &str| -> serde_json::Value {
        let out = eval_ten(&["--eval-capacity", "dropless", "--batch", batch, "--json"]);
        serde_json::from_str(&out).unwrap()
    };
    let (one, four) = (dropless("1"), dropless("4"));
    assert_eq!(one["capacity_factor"], 2.0, "{one}");
    assert_eq!(one["bits_per_byte"], four["bits_per_byte"], "{one} {four}");
    // The report says what capacity dropped at evaluation: nothing when dropless; a capacity of
    // a quarter of the tokens per expert drops some (a pair of experts at top-1 takes half).
    assert_eq!(one["dropped_fraction"], 0.0, "{one}");
    let tight: serde_json::Value = serde_json::from_str(&eval_ten(&[
        "--eval-capacity",
        "0.5",
        "--batch",
        "4",
        "--json",
    ]))
    .unwrap();
    let dropped = tight["dropped_fraction"].as_f64().unwrap();
    assert!((0.5..1.0).contains(&dropped), "{tight}");
    assert!(
        eval_ten(&["--eval-capacity", "0.5"]).contains("router choices dropped by capacity: "),
        "the text report says it too"
    );
    let some = eval_ten(&["--max-sequences", "5"]);
    assert!(
        some.contains("(80 bytes scored in 5 sequences, context 16)"),
        "{some}"
    );
    assert!(some.contains("5 of the file's 10 sequences"), "{some}");

    let out = gangway(&["export", "--checkpoint", &ckpt, "--out", &weights]);
    assert!(out.contains("parameters"), "{out}");
    gangway(&["import", "--weights", &weights, "--out", &back]);
    // The exported weights score the file as the checkpoint did.
    let again = gangway(&[
        "eval",
        "lm",
        "--checkpoint",
        &back,
        "--file",
        &fixture_path("README.md"),
        "--json",
    ]);
    let again: serde_json::Value = serde_json::from_str(&again).unwrap();
    assert_eq!(again["bits_per_byte"], eval["bits_per_byte"]);

    // Issue 42: fine-tuning. `--init` starts from the exported weights with fresh optimizer
    // state (the step count from 0), below a fresh model's first loss; the same weights in a
    // foreign safetensors (no gangway metadata) with the config as JSON give the same bits.
    let fine_tune = |init: &[&str]| {
        let mut args = vec!["train", "lm", "--steps", "2", "--json", &json];
        args.extend(init);
        args.extend(tiny);
        let out = gangway(&args);
        assert!(out.contains("2 steps (to step 2)"), "{out}");
        report_losses(&json)
    };
    let tuned = fine_tune(&["--init", &weights]);
    assert!(tuned[0] < fresh_first, "{tuned:?} against {fresh_first}");
    let bytes = std::fs::read(&weights).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let foreign = safetensors::serialize(st.tensors(), None).unwrap();
    let (foreign_path, config_path) = (path("foreign.safetensors"), path("config.json"));
    std::fs::write(&foreign_path, foreign).unwrap();
    let config = serde_json::from_str::<serde_json::Value>(&eval_config(&ckpt)).unwrap();
    std::fs::write(&config_path, config.to_string()).unwrap();
    let from_foreign = fine_tune(&["--init", &foreign_path, "--config", &config_path]);
    assert_eq!(from_foreign, tuned);
    // Weights NumPy wrote (scripts/foreign_weights.py, no gangway metadata) fine-tune from the
    // command line: their config's sizes win over the flags, and the loss falls.
    let numpy = gangway(&[
        "train",
        "lm",
        "--steps",
        "8",
        "--batch",
        "8",
        "--json",
        &json,
        "--init",
        &fixture_path("tests/fixtures/foreign/tiny.safetensors"),
        "--config",
        &fixture_path("tests/fixtures/foreign/tiny.config.json"),
    ]);
    assert!(numpy.contains("8 steps (to step 8), 320 tokens"), "{numpy}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["config"]["model"], 8, "{report}");
    let losses = report_losses(&json);
    assert!(losses[7] < losses[0] - 0.5, "{losses:?}");
    // Without the config, a foreign file's error says how to give it; a text shorter than the
    // context names the file and the length needed.
    let short = path("short.txt");
    std::fs::write(&short, "short").unwrap();
    for (args, says) in [
        (
            vec![
                "import",
                "--weights",
                foreign_path.as_str(),
                "--out",
                back.as_str(),
            ],
            "`gangway import --config`",
        ),
        (
            vec![
                "eval",
                "lm",
                "--checkpoint",
                ckpt.as_str(),
                "--file",
                short.as_str(),
            ],
            "short.txt, has 5 bytes, and a document needs at least 17 bytes",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    }

    let mut cut = std::fs::read(&weights).unwrap();
    cut.truncate(cut.len() / 2);
    std::fs::write(&back, cut).unwrap();
    for args in [
        vec!["generate", "--checkpoint", back.as_str()],
        vec!["import", "--weights", back.as_str(), "--out", &weights],
        vec!["train", "lm", "--resume", back.as_str()],
    ] {
        let bad = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(
            !bad.status.success() && err.contains("safetensors") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Transformer configuration a checkpoint holds, as JSON.
fn eval_config(checkpoint: &str) -> String {
    let c = gangway::transformer::TransformerCheckpoint::load(std::path::Path::new(checkpoint))
        .unwrap();
    serde_json::to_string(&c.config()).unwrap()
}
