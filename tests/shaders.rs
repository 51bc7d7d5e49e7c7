//! Every shader validates with naga and translates to SPIR-V, MSL, HLSL and GLSL: what "runs on
//! any GPU" means for gangway.

#![allow(clippy::unwrap_used)]

use gangway::DType;
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
