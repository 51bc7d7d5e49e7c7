//! Discovery, virtual devices, meshes, the pipeline cache an adapter's devices share and keep on
//! disk, and the autotuner: its clock and its on-disk cache.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, Need, case};
use gangway::device::{DiscoveryOptions, LimitsMode, parse_backends, parse_virtual_devices};
use gangway::kernels::autotune::{self, Autotuner, Clock};
use gangway::kernels::eager;
use gangway::kernels::elementwise::{self, ElementwiseOp};
use gangway::kernels::matmul::{MatmulShape, MatmulVariant};
use gangway::{DType, Device, Error, Mesh, MeshError};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(adapters: virtual_devices_split_every_adapter),
        case!(host: bad_settings_are_typed_errors),
        case!(adapters: mesh_groups_follow_named_axes),
        case!(adapters: webgpu_limits_refuse_a_kernel_that_needs_more_naming_the_limit),
        case!(adapters: pipeline_cache_is_kept_and_a_damaged_file_is_replaced)
            .needs(Need::PipelineCache),
        case!(device: autotuner_measures_once_and_reuses_its_cache),
        case!(device: autotuner_times_on_the_gpu_clock_where_there_is_one),
    ])
}

fn virtual_devices_split_every_adapter(adapters: &Adapters) {
    let (one, two) = (&adapters.mesh(1), &adapters.mesh(2));
    assert_eq!(two.len(), one.len() * 2);
    for pair in two.chunks(2) {
        assert_eq!(pair[0].info().adapter, pair[1].info().adapter);
        assert_eq!(
            (pair[0].info().virtual_index, pair[1].info().virtual_index),
            (0, 1)
        );
        assert_ne!(pair[0], pair[1]);
    }
    for d in one {
        if d.info().backend == "gl" {
            assert!(
                !d.info().features.shader_f16,
                "GLSL has no f16; GL must not offer it"
            );
        }
    }
}

fn bad_settings_are_typed_errors() {
    assert!(matches!(
        parse_backends("metal,warp"),
        Err(Error::UnknownBackend { .. })
    ));
    assert!(matches!(
        parse_virtual_devices("N", "0"),
        Err(Error::InvalidSetting { .. })
    ));
    assert!(matches!(
        parse_virtual_devices("N", "many"),
        Err(Error::InvalidSetting { .. })
    ));
    let msg = Error::NoAdapter {
        backends: "vulkan".into(),
    }
    .to_string();
    assert!(msg.contains("mesa-vulkan-drivers"), "{msg}");
}

/// Four virtual devices of the adapter.
fn mesh_groups_follow_named_axes(adapters: &Adapters) {
    let devs = adapters.mesh(4);
    let mesh = Mesh::new(&devs[..4], &[("data", 2), ("expert", 2)]).unwrap();
    assert!(matches!(
        mesh.sub("stage", 0),
        Err(Error::Mesh(MeshError::NoAxis { .. }))
    ));
    assert!(matches!(
        Mesh::new(&devs[..3], &[("data", 2), ("expert", 2)]),
        Err(Error::Mesh(MeshError::Size { holds: 4, .. }))
    ));
    // A data row is a gang over the expert axis; an expert column one over the data axis.
    let row = mesh.sub("data", 1).unwrap();
    assert_eq!(row.shape().to_string(), "{expert=2}");
    assert_eq!(row.devices(), &devs[2..4]);
    let column = mesh.sub("expert", 0).unwrap();
    assert_eq!(column.devices(), [devs[0].clone(), devs[2].clone()]);
    assert_eq!(column.shape().to_string(), "{data=2}");
    assert!(matches!(
        mesh.sub("data", 2),
        Err(Error::Mesh(MeshError::Coords { .. }))
    ));
    let line = mesh.reshape(&[("d", 4)]).unwrap();
    assert_eq!(line.sub("d", 3).unwrap().devices(), &devs[3..4]);
}

fn autotuner_measures_once_and_reuses_its_cache(device: &Device) {
    let dir = common::scratch_path("autotune", device);
    let path = dir.join("autotune.json");
    let _ = std::fs::remove_dir_all(&dir);
    let shape = MatmulShape::plain(40, 48, 36, DType::F32);
    let mut tuner = Autotuner::open(Some(path.clone())).unwrap();
    assert_eq!(tuner.cached(device, &shape), None);
    let chosen = tuner.choose(device, &shape).unwrap();
    assert!(MatmulVariant::ALL.contains(&chosen));
    let reopened = Autotuner::open(Some(path.clone())).unwrap();
    assert_eq!(reopened.cached(device, &shape), Some(chosen));
    // A program node's choice among the variants with vec4's sums: one of them that this adapter
    // can run, remembered apart from the choice among all; the subgroup kernel alone, where the
    // adapter has no subgroups, falls back to the tiled kernel.
    let mut tuner = reopened;
    let same = MatmulVariant::Vec4.same_sums();
    let among = tuner.choose_among(device, &shape, same).unwrap();
    assert!(
        same.contains(&among) && among.supports(device, &shape),
        "{among:?}"
    );
    assert_eq!(tuner.cached(device, &shape), Some(chosen));
    let alone = tuner
        .choose_among(device, &shape, &[MatmulVariant::Subgroup])
        .unwrap();
    if MatmulVariant::Subgroup.supports(device, &shape) {
        assert_eq!(alone, MatmulVariant::Subgroup);
    } else {
        assert_eq!(alone, MatmulVariant::Tiled);
    }
    // f16 sums are a bucket of their own, and what it holds can sum in f16.
    if device.supports(DType::F16) {
        let f16 = MatmulShape::plain(40, 48, 36, DType::F16);
        let sums = MatmulShape {
            f16_accumulate: true,
            ..f16
        };
        let chosen = tuner.choose(device, &sums).unwrap();
        assert!(chosen.supports(device, &sums), "{chosen:?}");
        assert_eq!(tuner.cached(device, &f16), None);
    }
    std::fs::write(&path, "{ not json").unwrap();
    assert!(matches!(
        Autotuner::open(Some(path)),
        Err(Error::Json { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A device with timestamp queries times the autotuner's runs on its own clock. That time is the
/// kernel's alone, so it fits inside the host's round trip for the same kernel. The two are
/// measured at different moments on a shared machine, so the bounds are wide (4× above, 1000×
/// below): they still catch a wrong tick period, which is off by powers of 1000.
fn autotuner_times_on_the_gpu_clock_where_there_is_one(device: &Device) {
    let shape = MatmulShape::plain(96, 72, 130, DType::F32);
    let variant = MatmulVariant::Naive;
    let m = autotune::measure(device, &shape, variant, 1, 5).unwrap();
    let want = if device.info().features.timestamp_query {
        Clock::Gpu
    } else {
        Clock::Host
    };
    assert_eq!(m.clock, want, "on {}", device.label());
    assert!(m.median_s.is_finite() && m.median_s > 0.0, "{m:?}");
    let mut host: Vec<f64> = (0..5)
        .map(|_| {
            let operands = autotune::Operands::random(device, &shape).unwrap();
            let args = operands.args(variant);
            let kernel = gangway::kernels::Matmul {
                trans_a: false,
                trans_b: false,
                offsets: None,
                limits: None,
                choice: gangway::kernels::matmul::VariantChoice::Fixed(variant),
                f16_accumulate: false,
                epilogue: gangway::kernels::Epilogue::NONE,
            };
            let start = std::time::Instant::now();
            gangway::kernels::eager::run_one(&kernel, &[args.a, args.b]).unwrap();
            start.elapsed().as_secs_f64()
        })
        .collect();
    let host = autotune::median(&mut host);
    assert!(
        m.median_s <= 4.0 * host && m.median_s >= host / 1000.0,
        "GPU {:.1} µs against the host's round trip {:.1} µs on {}",
        m.median_s * 1e6,
        host * 1e6,
        device.label()
    );
}

/// An adapter's two devices compile with the pipeline cache they share, kept in one file under
/// the cache directory: written (gangway's header, then wgpu's data) once a pipeline was
/// compiled, read by the next discovery, and a damaged file (garbage, cut short, or over a
/// gibibyte) is no error:
/// the kernels compile and compute as before, and the next save replaces the file whole. What the
/// driver keeps in it is the driver's: lavapipe 22.3 keeps nothing, so this checks the file and
/// the kernels' results, not that a compile was skipped.
fn pipeline_cache_is_kept_and_a_damaged_file_is_replaced(adapters: &Adapters) {
    let dir = common::scratch_path("pipeline-cache", &adapters.mesh(1)[0]);
    let _ = std::fs::remove_dir_all(&dir);
    let opts = DiscoveryOptions {
        virtual_devices: 2,
        pipeline_cache: Some(dir.clone()),
        ..DiscoveryOptions::from_env().unwrap()
    };
    // The project's affine kernel on each device, checked against its reference.
    let op = ElementwiseOp::Affine {
        scale: 3.0,
        shift: 1.0,
        repeat: 1,
    };
    let run_on = |devices: &[Device]| {
        for d in devices {
            let x: Vec<f32> = (0..100).map(|i| i as f32 * 0.5).collect();
            let t = gangway::Tensor::from_f32(d, &[100], DType::F32, &x).unwrap();
            let got = eager::run_one(&op, &[&t]).unwrap().to_f32().unwrap();
            assert_eq!(got, elementwise::reference(op, &x, None), "{}", d.label());
        }
    };
    let first = adapters.discover(&opts);
    let file = first[0].pipeline_cache_file().unwrap().to_path_buf();
    assert!(
        file.starts_with(dir.join("pipelines")),
        "{}",
        file.display()
    );
    assert_eq!(first[1].pipeline_cache_file(), Some(file.as_path()));
    assert!(!file.exists(), "nothing compiled yet");
    run_on(&first);
    let kept = std::fs::read(&file).unwrap();
    assert_eq!(&kept[..8], b"GWPIPEC\0");
    let data_len = u64::from_le_bytes(kept[12..20].try_into().unwrap());
    assert_eq!(kept.len() as u64, 24 + data_len);
    assert_eq!(
        &kept[24..32],
        b"WGPUPLCH",
        "wgpu's header follows gangway's"
    );
    drop(first);
    // The next discovery reads it; then a damaged file, in two ways.
    run_on(&adapters.discover(&opts));
    for damage in [
        b"not a pipeline cache".to_vec(),
        kept[..kept.len() - 3].to_vec(),
    ] {
        std::fs::write(&file, &damage).unwrap();
        run_on(&adapters.discover(&opts));
        assert_eq!(std::fs::read(&file).unwrap(), kept, "replaced whole");
    }
    // One past a gibibyte (a sparse file, which the size check skips unread) likewise.
    std::fs::File::create(&file)
        .unwrap()
        .set_len((1 << 30) + 1)
        .unwrap();
    run_on(&adapters.discover(&opts));
    assert_eq!(std::fs::read(&file).unwrap(), kept, "replaced whole");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under `GANGWAY_LIMITS=webgpu` a device has WebGPU's defaults, whatever its adapter offers; a
/// kernel that needs more (here 9 storage buffers, or 32 KiB of workgroup memory) is refused
/// with an error naming the limit, and the same kernels within the defaults compile.
fn webgpu_limits_refuse_a_kernel_that_needs_more_naming_the_limit(adapters: &Adapters) {
    let opts = DiscoveryOptions {
        limits: LimitsMode::WebGpu,
        ..DiscoveryOptions::from_env().unwrap()
    };
    let device = &adapters.discover(&opts)[0];
    let limits = &device.info().limits;
    assert_eq!(limits.max_storage_buffers_per_shader_stage, 8);
    assert_eq!(limits.max_compute_workgroup_storage_size, 16 << 10);
    assert_eq!(limits.max_compute_invocations_per_workgroup, 256);
    let buffers = |n: usize| {
        let mut s = String::new();
        for i in 0..n {
            s.push_str(&format!(
                "@group(0) @binding({i}) var<storage, read_write> b{i}: array<f32>;\n"
            ));
        }
        s.push_str("@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) id: vec3<u32>) {\n");
        for i in 0..n {
            s.push_str(&format!("    b{i}[id.x] = f32({i});\n"));
        }
        s.push_str("}\n");
        s
    };
    let tile = |floats: usize| {
        format!(
            "@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n\
             var<workgroup> tile: array<f32, {floats}>;\n\
             @compute @workgroup_size(64)\n\
             fn main(@builtin(local_invocation_index) i: u32) {{\n\
                 tile[i] = f32(i);\n    workgroupBarrier();\n    out[i] = tile[63u - i];\n}}\n"
        )
    };
    let refused = |key: &str, source: String, limit: &str, needed: u64, has: u64| match device
        .pipeline(key, "main", true, || source)
    {
        Err(Error::LimitExceeded {
            limit_name,
            requested,
            limit: l,
            ..
        }) => assert_eq!((limit_name, requested, l), (limit, needed, has), "{key}"),
        Err(e) => panic!("{key}: another error: {e}"),
        Ok(_) => panic!("{key}: compiled past the limit"),
    };
    refused(
        "nine buffers",
        buffers(9),
        "max_storage_buffers_per_shader_stage",
        9,
        8,
    );
    refused(
        "32 KiB tile",
        tile(8192),
        "max_compute_workgroup_storage_size",
        32 << 10,
        16 << 10,
    );
    device
        .pipeline("eight buffers", "main", true, || buffers(8))
        .unwrap();
    device
        .pipeline("16 KiB tile", "main", true, || tile(4096))
        .unwrap();
}
