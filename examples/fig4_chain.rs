//! Pathways Fig. 4: the three-stage chain (`gangway::program::chain`, `x + 1` per stage) on
//! devices 0, 1 and 2, run with parallel asynchronous dispatch and checked against the host.
//!
//! `cargo run --release --example fig4_chain` (three devices: real, or virtual with
//! `GANGWAY_VIRTUAL_DEVICES=3`).

use gangway::program::{CompileOptions, chain, chain_reference};
use gangway::sched::{ResourceManager, RunOptions, Runtime, RuntimeOptions, SliceRequest};
use gangway::{DiscoveryOptions, discover};
use std::sync::Arc;

fn main() -> anyhow::Result<()> {
    let devices = discover(&DiscoveryOptions::from_env()?)?;
    let manager = ResourceManager::new(devices.clone());
    let slice = manager.acquire(&SliceRequest::Devices(3.min(devices.len())))?;
    let last = slice.devices().len() - 1;

    let program = chain(&[0, 1.min(last), last], 1024)?;

    let exec = Arc::new(program.compile(slice.devices(), CompileOptions::default())?);
    let runtime = Runtime::new(devices, RuntimeOptions::default())?;
    let client = runtime.client("example", 1);
    let input: Vec<f32> = (0..1024).map(|i| i as f32 / 100.0 - 5.0).collect();
    let out = client.run(&exec, vec![input.clone()], RunOptions::default())?;

    let want = chain_reference(&input, 3);
    let err = out[0]
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f32::max);
    println!(
        "{} nodes on {:?}; max |GPU - host| = {err:.1e}",
        program.nodes().len(),
        slice
            .devices()
            .iter()
            .map(|d| d.label())
            .collect::<Vec<_>>()
    );
    anyhow::ensure!(err < 1e-5, "wrong result");
    Ok(())
}
