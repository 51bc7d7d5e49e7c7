//! `gangway trace` on other tools' traces and on gangway's own: what it sums up, and a bad file.

use super::*;

/// Issue 25: PyTorch's profiler trace (string pids, instants, flows) and JAX's gzipped one sum
/// up with their threads, named as the files name them, and their counts.
pub(super) fn trace_sums_up_pytorch_and_jax_profiler_traces() {
    let out = gangway(&["trace", &fixture("pytorch-mlp.json")]);
    assert!(
        out.starts_with(
            "foreign trace (one row per thread): 261 trace events, 223 slices and 2 instants"
        ),
        "{out}"
    );
    assert!(out.contains("phases: M 8, X 223, f 14, i 2, s 14"), "{out}");
    // Flows bind to their slices and instants are kept: nothing is left undrawn.
    assert!(!out.contains("not drawn"), "{out}");
    assert!(
        out.contains("  python (pid 16108)\n    thread 16108 (python)"),
        "{out}"
    );
    assert!(
        out.contains("  process Spans\n    thread PyTorch Profiler"),
        "{out}"
    );
    assert!(out.contains("PyTorch Profiler (0)"), "{out}");

    let json: serde_json::Value =
        serde_json::from_str(&gangway(&["trace", "--json", &fixture("pytorch-mlp.json")])).unwrap();
    assert_eq!(json["dialect"], "foreign");
    assert_eq!(json["events"], 261);
    let threads: Vec<(String, u64)> = json["processes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["threads"].as_array().unwrap().iter())
        .map(|t| {
            (
                t["tid"].as_str().unwrap().to_string(),
                t["slices"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        threads,
        [
            ("16108".to_string(), 222),
            ("PyTorch Profiler".to_string(), 1)
        ]
    );
    assert_eq!(json["top_names"][0]["name"], "PyTorch Profiler (0)");
    assert_eq!(json["top_names"][1]["name"], "train_step_0");

    let json: serde_json::Value = serde_json::from_str(&gangway(&[
        "trace",
        "--json",
        &fixture("jax-mlp.trace.json.gz"),
    ]))
    .unwrap();
    assert_eq!(
        (json["events"].as_u64(), json["slices"].as_u64()),
        (Some(195), Some(188))
    );
    let p = &json["processes"][0];
    assert_eq!(p["name"], "/host:CPU");
    let threads: Vec<(&str, u64)> = p["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["slices"].as_u64().unwrap()))
        .collect();
    // Ordered by JAX's thread_sort_index: python 1, the XLA client 2.
    assert_eq!(
        threads,
        [
            ("python", 73),
            ("tf_XLAPjRtCpuClient/3583329669373636408", 115)
        ]
    );
    assert_eq!(
        json["top_names"][0]["name"],
        "$api.py:2479 block_until_ready"
    );
}

/// Issue 38: the npm tracer webpack uses, run as process 1 (pid 1, tid 1, no `cat`, no
/// metadata), was read as gangway's own: its slices were "kernels" of "device 1". It is one
/// thread of one process; only a trace with gangway's marker has devices.
pub(super) fn trace_reads_a_plain_pid_1_trace_as_anyones() {
    let out = gangway(&["trace", &fixture("node-chrome-trace-event.json")]);
    assert!(
        out.starts_with(
            "foreign trace (one row per thread): 24 trace events, 12 slices and 3 instants"
        ),
        "{out}"
    );
    assert!(out.contains("  process 1\n    thread 1"), "{out}");
    assert!(!out.contains("kernels"), "{out}");
}

/// gangway's own pipeline trace: per device kernels against transfers, and the bubble the one
/// computation measures (the simulation's, as `gangway pipeline` prints it).
pub(super) fn trace_sums_up_a_pipeline_trace_with_its_bubble() {
    let dir = std::env::temp_dir().join(format!("gangway-cli-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("1f1b.json");
    let printed = gangway(&[
        "pipeline",
        "--schedule",
        "gpipe",
        "--stages",
        "2",
        "--microbatches",
        "2",
        "--trace",
        path.to_str().unwrap(),
    ]);
    let out = gangway(&["trace", path.to_str().unwrap()]);
    assert!(out.starts_with("gangway trace"), "{out}");
    assert!(
        out.contains("device 0") && out.contains("kernels 4"),
        "{out}"
    );
    // GPipe, p = 2, m = 2, equal costs: (p − 1) / (m + p − 1) = 1/3, as the simulator says.
    assert!(
        out.contains("pipeline bubble: 33.3% (2 stages"),
        "{out}\n{printed}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&gangway(&["trace", "--json", path.to_str().unwrap()])).unwrap();
    assert_eq!(json["dialect"], "gangway");
    assert_eq!(json["bubble"]["stages"], 2);
    assert_eq!(json["devices"].as_array().unwrap().len(), 2);
    std::fs::remove_dir_all(&dir).ok();
}

pub(super) fn trace_of_a_bad_file_is_a_one_line_error() {
    let dir = std::env::temp_dir().join(format!("gangway-cli-badtrace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: [(&str, &[u8], &str); 3] = [
        (
            "torn.json",
            b"{\"traceEvents\": [{\"ph\": \"X\"",
            "not JSON",
        ),
        (
            "nots.json",
            b"[{\"ph\": \"X\", \"pid\": 1}]",
            "traceEvents[0]: missing \"ts\"",
        ),
        (
            "torn.json.gz",
            b"\x1f\x8b\x08\x00",
            "not a readable gzip file",
        ),
    ];
    for (name, text, says) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["trace", path.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.starts_with("error: ") && err.contains(says) && err.lines().count() == 1,
            "{name}: {err}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["trace", "/nonexistent/trace.json"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/trace.json"));
    std::fs::remove_dir_all(&dir).ok();
}
