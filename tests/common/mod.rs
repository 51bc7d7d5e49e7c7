//! Shared by the integration tests: every device found, discovered once per test binary.
//!
//! With `GANGWAY_REQUIRE_ADAPTER=1` (CI) a machine without adapters fails the tests; otherwise the
//! GPU tests print why they did nothing.

#![allow(dead_code)]

use gangway::{Device, DiscoveryOptions, discover};
use std::sync::OnceLock;

/// One device per adapter (no virtual splitting), on the backends `WGPU_BACKEND` allows.
pub fn devices() -> &'static [Device] {
    static DEVICES: OnceLock<Vec<Device>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        let mut opts = DiscoveryOptions::from_env().expect("valid environment");
        opts.virtual_devices = 1;
        found_or_skip(discover(&opts))
    })
}

/// Two virtual devices from each adapter: a mesh spanning adapters and virtual devices.
pub fn virtual_devices() -> &'static [Device] {
    static DEVICES: OnceLock<Vec<Device>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        let mut opts = DiscoveryOptions::from_env().expect("valid environment");
        opts.virtual_devices = 2;
        found_or_skip(discover(&opts))
    })
}

fn found_or_skip(found: gangway::Result<Vec<Device>>) -> Vec<Device> {
    let required = std::env::var("GANGWAY_REQUIRE_ADAPTER").is_ok_and(|v| v == "1");
    match found {
        Ok(d) => d,
        Err(e) if !required => {
            eprintln!("SKIPPING GPU tests: {e}");
            Vec::new()
        }
        Err(e) => panic!("GANGWAY_REQUIRE_ADAPTER=1 but: {e}"),
    }
}

/// Asserts `got` is within `tol` (relative to the magnitude) of `want`, element by element.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        assert!(
            err <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, want {w} (|err| {err} > tol {tol})"
        );
    }
}
