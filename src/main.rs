//! The `gangway` command line.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use gangway::bench::{self, matmul as mm_bench};
use gangway::device::{parse_backends, parse_virtual_devices};
use gangway::kernels::matmul::MatmulVariant;
use gangway::kernels::router::RouterConfig;
use gangway::moe_layer::{MoeLayerConfig, run_expert_parallel};
use gangway::{DType, Device, DiscoveryOptions, discover};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "gangway",
    version,
    about = "Pathways-style sharded ML on every GPU, through WebGPU"
)]
struct Cli {
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug)]
struct DeviceArgs {
    /// Backends to search, e.g. `vulkan,gl` [default: $WGPU_BACKEND, else all]
    #[arg(long, global = true, value_parser = parse_backends_arg)]
    backends: Option<wgpu::Backends>,
    /// Devices to make from each adapter [default: $GANGWAY_VIRTUAL_DEVICES, else 1]
    #[arg(long, global = true, value_parser = parse_virtual_arg)]
    virtual_devices: Option<usize>,
}

fn parse_backends_arg(s: &str) -> Result<wgpu::Backends, String> {
    parse_backends(s).map_err(|e| e.to_string())
}

fn parse_virtual_arg(s: &str) -> Result<usize, String> {
    parse_virtual_devices("--virtual-devices", s).map_err(|e| e.to_string())
}

impl DeviceArgs {
    fn discover(&self) -> Result<Vec<Device>> {
        let mut opts = DiscoveryOptions::from_env()?;
        if let Some(b) = self.backends {
            opts.backends = b;
        }
        if let Some(n) = self.virtual_devices {
            opts.virtual_devices = n;
        }
        Ok(discover(&opts)?)
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List every device: adapter, backend, type, driver, limits and features.
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run one expert-parallel MoE layer over every device and check it against a CPU reference.
    Demo(DemoArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Args, Debug)]
struct DemoArgs {
    #[arg(long, default_value_t = 256)]
    tokens_per_device: usize,
    /// Experts (rounded up to a multiple of the device count).
    #[arg(long, default_value_t = 8)]
    experts: usize,
    #[arg(long, default_value_t = 2)]
    top_k: usize,
    #[arg(long, default_value_t = 1.25)]
    capacity_factor: f32,
    #[arg(long, default_value_t = 64)]
    d_model: usize,
    #[arg(long, default_value_t = 128)]
    d_out: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// GFLOP/s of every matmul variant on every adapter.
    Matmul(MatmulBenchArgs),
}

#[derive(Args, Debug)]
struct MatmulBenchArgs {
    /// Square sizes to run (a tall-skinny expert shape is always added).
    #[arg(long, value_delimiter = ',', default_values_t = [256, 512, 1024])]
    sizes: Vec<usize>,
    /// Variants to run: naive, tiled, vec4.
    #[arg(long, value_delimiter = ',', default_values_t = ["naive".to_string(), "tiled".into(), "vec4".into()])]
    variants: Vec<String>,
    #[arg(long, value_enum, default_value = "f32")]
    dtype: DTypeArg,
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum DTypeArg {
    F32,
    F16,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Devices { json } => devices(&cli.devices.discover()?, json),
        Command::Demo(args) => demo(&cli.devices.discover()?, &args),
        Command::Bench(BenchCommand::Matmul(args)) => bench_matmul(&cli.devices.discover()?, &args),
    }
}

fn devices(devices: &[Device], json: bool) -> Result<()> {
    if json {
        let infos: Vec<_> = devices.iter().map(Device::info).collect();
        println!("{}", serde_json::to_string_pretty(&infos)?);
        return Ok(());
    }
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    let rows: Vec<Vec<String>> = devices
        .iter()
        .map(|d| {
            let i = d.info();
            vec![
                i.id.to_string(),
                format!("{}/{}", i.adapter, i.virtual_index),
                i.name.clone(),
                i.backend.clone(),
                i.device_type.clone(),
                format!("{} {}", i.driver, i.driver_info).trim().to_string(),
                format!("{} MiB", i.limits.max_storage_buffer_binding_size >> 20),
                format!("{} KiB", i.limits.max_compute_workgroup_storage_size >> 10),
                yes(i.features.timestamp_query),
                yes(i.features.shader_f16),
                yes(i.features.subgroups),
            ]
        })
        .collect();
    print!(
        "{}",
        bench::markdown_table(
            &[
                "id",
                "adapter/virtual",
                "name",
                "backend",
                "type",
                "driver",
                "max binding",
                "workgroup mem",
                "timestamps",
                "f16",
                "subgroups",
            ],
            &rows
        )
    );
    Ok(())
}

fn demo(devices: &[Device], args: &DemoArgs) -> Result<()> {
    let n = devices.len();
    let experts = args.experts.div_ceil(n) * n;
    let cfg = MoeLayerConfig {
        tokens_per_device: args.tokens_per_device,
        d_model: args.d_model,
        d_out: args.d_out,
        experts,
        router: RouterConfig {
            experts,
            k: args.top_k,
            capacity_factor: args.capacity_factor,
            normalize_gates: true,
        },
        seed: args.seed,
    };
    let report = run_expert_parallel(devices, &cfg)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("expert-parallel MoE layer over {n} devices:");
        for d in &report.devices {
            println!("  {d}");
        }
        println!(
            "{} tokens, {} experts, top-{}, capacity {} per expert per device",
            report.tokens, report.experts, args.top_k, report.capacity_per_device
        );
        println!("tokens per expert: {:?}", report.tokens_per_expert);
        println!(
            "dropped: {:.2}%   aux loss: {:.4}   time: {:.3} s",
            report.dropped_fraction * 100.0,
            report.aux_loss,
            report.seconds
        );
        println!("max |GPU - CPU reference|: {:.2e}", report.max_abs_error);
    }
    if report.max_abs_error > 1e-3 {
        bail!(
            "the GPU result differs from the CPU reference by {}",
            report.max_abs_error
        );
    }
    Ok(())
}

fn bench_matmul(devices: &[Device], args: &MatmulBenchArgs) -> Result<()> {
    let mut variants = args
        .variants
        .iter()
        .map(|v| MatmulVariant::from_name(v).with_context(|| format!("unknown variant {v:?}")))
        .collect::<Result<Vec<_>>>()?;
    variants.sort();
    let dtype = match args.dtype {
        DTypeArg::F32 => DType::F32,
        DTypeArg::F16 => DType::F16,
    };
    // One device per adapter: virtual devices of one adapter share its hardware.
    let adapters: Vec<Device> = devices
        .iter()
        .filter(|d| d.info().virtual_index == 0)
        .cloned()
        .collect();
    let cases = mm_bench::standard_cases(dtype, &args.sizes);
    let results = mm_bench::run(&adapters, &cases, &variants, args.warmup, args.reps, |r| {
        eprintln!(
            "{} ({}) {} {}: {:.2} GFLOP/s",
            r.adapter,
            r.backend,
            r.case,
            r.variant.name(),
            r.gflops
        );
    })?;
    print!("{}", mm_bench::table(&results));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
