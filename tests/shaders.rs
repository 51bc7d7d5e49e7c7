//! Every shader validates with naga and translates to SPIR-V, MSL, HLSL and GLSL, and every entry
//! point fits WebGPU's default limits (or is a variant its launcher takes only where a device
//! gives more), as the book's table of their needs says: what "runs on any GPU" means for
//! gangway.

#![allow(clippy::unwrap_used)]

mod common;

use gangway::DType;
use gangway::device::DeviceLimits;
use gangway::kernels::ALL_SHADERS;
use naga::back::{glsl, hlsl, msl, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn entry_points(module: &naga::Module) -> Vec<String> {
    module.entry_points.iter().map(|e| e.name.clone()).collect()
}

#[test]
fn every_shader_validates_and_translates_to_every_backend_language() {
    let mut checked = 0;
    for shader in ALL_SHADERS {
        for &dtype in shader.dtypes {
            let name = shader.key(dtype);
            let source = shader.instantiate(dtype);
            let module = naga::front::wgsl::parse_str(&source)
                .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&source)));
            let info = Validator::new(ValidationFlags::all(), Capabilities::all())
                .validate(&module)
                .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&source)));

            let words = spv::write_vec(&module, &info, &spv::Options::default(), None)
                .unwrap_or_else(|e| panic!("{name} -> SPIR-V: {e}"));
            assert!(!words.is_empty());

            let mut msl_out = String::new();
            let msl_opts = msl::Options {
                lang_version: (2, 4),
                ..Default::default()
            };
            msl::Writer::new(&mut msl_out)
                .write(&module, &info, &msl_opts, &msl::PipelineOptions::default())
                .unwrap_or_else(|e| panic!("{name} -> MSL: {e}"));
            assert!(msl_out.contains("kernel"), "{name}: MSL has no kernel");

            let mut hlsl_out = String::new();
            let hlsl_opts = hlsl::Options {
                shader_model: hlsl::ShaderModel::V6_2,
                ..Default::default()
            };
            hlsl::Writer::new(&mut hlsl_out, &hlsl_opts, &hlsl::PipelineOptions::default())
                .write(&module, &info, None)
                .unwrap_or_else(|e| panic!("{name} -> HLSL: {e}"));
            assert!(hlsl_out.contains("numthreads"), "{name}: HLSL has no entry");

            for entry in entry_points(&module) {
                let mut glsl_out = String::new();
                let options = glsl::Options {
                    version: glsl::Version::Desktop(450),
                    ..Default::default()
                };
                let pipeline = glsl::PipelineOptions {
                    shader_stage: naga::ShaderStage::Compute,
                    entry_point: entry.clone(),
                    multiview: None,
                };
                let written = glsl::Writer::new(
                    &mut glsl_out,
                    &module,
                    &info,
                    &options,
                    &pipeline,
                    naga::proc::BoundsCheckPolicies::default(),
                )
                .and_then(|mut w| w.write());
                if dtype == DType::F16 {
                    // GLSL has no 16-bit floats, and wgpu's GL backend never offers shader-f16,
                    // so f16 kernels cannot be asked for there (tests/devices.rs checks that).
                    assert!(
                        written.is_err(),
                        "{name}: naga's GLSL now takes f16; test it"
                    );
                    continue;
                }
                written.unwrap_or_else(|e| panic!("{name}::{entry} -> GLSL: {e}"));
                assert!(
                    glsl_out.contains("void main"),
                    "{name}::{entry}: no GLSL main"
                );
            }
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        ALL_SHADERS.iter().map(|s| s.dtypes.len()).sum::<usize>()
    );
}

/// Every entry point fits WebGPU's guaranteed limits (`wgpu::Limits::default()`), and the book's
/// table of what each needs (`docs/src/reference/kernel-limits.md`) is what naga reads from the
/// shaders: it fails when they differ, and `GANGWAY_WRITE_DOCS=1` rewrites it.
#[test]
fn every_kernel_fits_webgpus_default_limits_as_the_book_lists_them() {
    let webgpu: DeviceLimits = (&wgpu::Limits::default()).into();
    let mut text = String::from(
        "# What each kernel needs of a device\n\n\
         Every compute entry point and what it needs of a device's limits, read from its WGSL by \
         naga (`KernelNeeds`: only what the entry point reaches counts, as wgpu counts it; \
         workgroup variables each rounded up to 16 bytes, as WebGPU counts them), in f32 at the \
         shader's constants as written. Launchers that specialise constants keep within them \
         (attention's `TILE × D4 ≤ 512` vec4s a tile). WebGPU guarantees 8 storage buffers per \
         stage, 16 KiB of workgroup memory and 256 invocations a workgroup: every kernel fits, \
         or is a variant its launcher takes only where the device's limits allow, with one that \
         fits elsewhere (`tests/shaders.rs` checks both). `GANGWAY_LIMITS=webgpu` creates \
         devices with no more than WebGPU's defaults, so the tests can show it on an adapter \
         that offers more. A kernel that \
         needs more than a device gives is refused with `Error::LimitExceeded` naming the limit. \
         `gangway devices --verbose` prints this table against each device's limits. Generated by \
         `tests/shaders.rs`; `GANGWAY_WRITE_DOCS=1 cargo test --test shaders` rewrites it.\n\n\
         | shader | entry point | storage buffers | workgroup memory (bytes) | workgroup size | \
         within WebGPU's defaults |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut wrong = Vec::new();
    for shader in ALL_SHADERS {
        for (entry, needs) in shader.needs().unwrap() {
            let [x, y, z] = needs.workgroup_size;
            let over = needs.over(&webgpu);
            let fits = match (over.is_empty(), shader.chosen_by_limits) {
                (true, None) => "yes".to_string(),
                (false, Some(how)) => format!("no: {how}"),
                (true, Some(_)) => {
                    wrong.push(format!(
                        "{}::{entry} fits: chosen_by_limits is None",
                        shader.name
                    ));
                    continue;
                }
                (false, None) => {
                    wrong.push(format!("{}::{entry}: {over:?}", shader.name));
                    continue;
                }
            };
            text.push_str(&format!(
                "| `{}` | `{entry}` | {} | {} | {x}×{y}×{z} | {fits} |\n",
                shader.name, needs.storage_buffers, needs.workgroup_bytes
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "beyond WebGPU's defaults with no variant chosen by the device's limits, or said to be \
         so and fitting:\n{}",
        wrong.join("\n")
    );
    common::generated::check_page(
        "docs/src/reference/kernel-limits.md",
        &text,
        "cargo test --test shaders",
    );
}
