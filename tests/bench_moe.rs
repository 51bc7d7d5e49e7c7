//! Smoke test of `gangway bench moe` at tiny sizes: every section yields finite, positive
//! numbers, device counts beyond those present are skipped rows, and the table has every row.
#![allow(clippy::unwrap_used)]

use gangway::bench::moe::{MoeBenchOptions, run, table};
use std::time::Instant;

#[test]
fn tiny_moe_bench_runs_every_section() {
    let mut opts = gangway::DiscoveryOptions::from_env().unwrap();
    opts.virtual_devices = 4;
    let devices = match gangway::discover(&opts) {
        Ok(d) if !d.is_empty() => d,
        found => {
            eprintln!("SKIPPING: no GPU adapter ({:?})", found.map(|d| d.len()));
            return;
        }
    };
    let o = MoeBenchOptions::tiny();
    let t0 = Instant::now();
    let results = run(&devices, &o, |r| eprintln!("{} {}", r.section, r.case)).unwrap();
    let expected = 2 + o.experts.len() + o.devices.len();
    assert_eq!(results.len(), expected);
    for section in ["moe-vs-dense", "experts", "all-to-all"] {
        assert!(results.iter().any(|r| r.section == section), "{section}");
    }
    for r in &results {
        if let Some(reason) = &r.skipped {
            assert_eq!(r.section, "all-to-all");
            assert!(r.devices > devices.len(), "{} skipped: {reason}", r.case);
            continue;
        }
        for (what, x) in [
            ("step_s", r.step_s),
            ("tokens_per_s", r.tokens_per_s),
            ("ratio", r.ratio),
        ] {
            assert!(x.is_finite() && x > 0.0, "{}: {what} = {x}", r.case);
        }
        assert!(r.params >= r.active_params && r.active_params > 0);
        assert!((0.0..=1.0).contains(&r.dropped_fraction));
        if r.section == "moe-vs-dense" {
            assert_eq!(r.dropped_fraction, 0.0, "{}", r.case);
        }
        if r.section == "all-to-all" {
            let share = r.all_to_all_share.unwrap();
            assert!(share.is_finite() && (0.0..1.0).contains(&share), "{share}");
            assert!(r.all_to_all_s.unwrap() >= 0.0);
        }
    }
    // Parameters grow with the experts.
    let sweep: Vec<_> = results.iter().filter(|r| r.section == "experts").collect();
    assert!(sweep.windows(2).all(|w| w[1].params > w[0].params));
    let md = table(&results);
    eprintln!("{md}");
    assert_eq!(md.lines().count(), 2 + results.len());
    for r in &results {
        assert!(md.contains(&r.case), "{}", r.case);
    }
    eprintln!("tiny bench: {:.2}s", t0.elapsed().as_secs_f64());
}

/// The default sizes, for a sample table: `cargo test --release --test bench_moe -- --ignored
/// --nocapture`.
#[test]
#[ignore = "runs the full default bench (minutes)"]
fn default_moe_bench() {
    let mut opts = gangway::DiscoveryOptions::from_env().unwrap();
    opts.virtual_devices = 4;
    let Ok(devices) = gangway::discover(&opts) else {
        return;
    };
    let t0 = Instant::now();
    let results = run(&devices, &MoeBenchOptions::default(), |r| {
        eprintln!("{} {} {:.1} ms", r.section, r.case, r.step_s * 1e3)
    })
    .unwrap();
    eprintln!("{}", table(&results));
    eprintln!("default bench: {:.1}s", t0.elapsed().as_secs_f64());
}
