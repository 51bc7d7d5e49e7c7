#!/usr/bin/env bash
# The check to run on a machine with a real GPU, from a prebuilt release binary: no Rust
# toolchain and no network needed. In under 10 minutes it
#   1. says what the Vulkan stack lacks, if anything (loader, ICD files, NVIDIA's ICD);
#   2. lists the devices, and stops with a plain error if the only adapters are software ones
#      (llvmpipe/lavapipe, SwiftShader): a software adapter is never reported as the GPU;
#   3. prints every adapter's limits and subgroup size, and which kernels fit them
#      (`devices --verbose`);
#   4. runs the quick bench and the full matmul suite (1024, 2048, 4096, the transposed and grouped
#      shapes) on the first hardware adapter, writing JSON and Markdown with the fraction of FP32
#      peak (give --peak-gflops through GANGWAY_PEAK_GFLOPS where the built-in table lacks it);
#   5. runs the quick matmul, attention and MoE suites again on a device created with only
#      WebGPU's guaranteed limits (GANGWAY_LIMITS=webgpu), as a browser or small GPU would give;
#   6. the host's cost: the dispatch suite (gangway against raw wgpu, tracing off and on) on 4
#      virtual devices of the adapter, and the CPU to start and run one MoE step on 4 Vulkan
#      devices twice, with an empty pipeline cache and then with the one the first start
#      filled (autotuning off in both, so only the driver's compiled pipelines differ).
#
#   scripts/gpu-check.sh [BINARY] [OUT_DIR]     (defaults: target/release/gangway, gpu-check)
#
# Exit status: 0 all ran; 2 no hardware adapter (what is missing is printed); 3 a step failed or
# ran past its time.
set -uo pipefail
bin=${1:-target/release/gangway}
out=${2:-gpu-check}
mkdir -p "$out"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
log() { printf '%s\n' "$*" | tee -a "$out/check.log"; }
: > "$out/check.log"

[ -x "$bin" ] || { log "error: no gangway binary at $bin (build one: cargo build --release)"; exit 3; }
log "gangway: $("$bin" --version 2>&1)"
log "host: $(uname -srm), $(nproc) cores"

# --- The Vulkan stack. wgpu needs the loader (libvulkan.so.1) and a driver's ICD file.
missing=0
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; then
  log "missing: the Vulkan loader libvulkan.so.1 (Debian/Ubuntu: apt-get install libvulkan1)"
  missing=1
fi
icd_dirs=(/usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d)
icds=$(for d in "${icd_dirs[@]}"; do ls "$d"/*.json 2>/dev/null; done)
for v in VK_ICD_FILENAMES VK_DRIVER_FILES; do
  [ -n "${!v:-}" ] && icds+=$'\n'"${!v//:/$'\n'}"
done
log "Vulkan ICD files: $(echo $icds | tr '\n' ' ')"
if command -v nvidia-smi >/dev/null 2>&1; then
  log "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  if ! grep -qil nvidia $icds 2>/dev/null; then
    log "missing: NVIDIA's Vulkan ICD (nvidia_icd.json). The driver is loaded but its Vulkan part is"
    log "  not visible here; a compute-only container lacks it. Mount the driver's Vulkan files"
    log "  (NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics with the NVIDIA container toolkit),"
    log "  or install the matching libnvidia-gl package, or point VK_ICD_FILENAMES at the file."
    missing=1
  fi
  if ! ldconfig -p 2>/dev/null | grep -q 'libGLX_nvidia\.so\.0'; then
    log "note: libGLX_nvidia.so.0 (which NVIDIA's ICD names) is not in the linker cache"
  fi
fi

# --- The devices, and the first hardware adapter.
"$bin" devices > "$out/devices.txt" 2>&1
"$bin" devices --json > "$out/devices.json" 2> "$out/devices.err"
cat "$out/devices.txt" | tee -a "$out/check.log"
"$bin" devices --verbose > "$out/devices-verbose.txt" 2>&1
"$bin" devices --json | grep -E '"(name|backend|subgroup_min_size)"' | tee -a "$out/check.log"
# One line per adapter: index, device type, name (backend). Read without jq or python.
adapters=$(tr -d '\n' < "$out/devices.json" | grep -o '"adapter": *[0-9]*, *"virtual_index": *0,[^}]*"device_type": *"[a-z_]*"' |
  sed -E 's/.*"adapter": *([0-9]+).*"name": *"([^"]*)".*"backend": *"([a-z0-9]*)".*"device_type": *"([a-z_]*)".*/\1 \4 \2 (\3)/')
log "adapters (index, type, name):"
log "${adapters:-  none}"
gpu=$(echo "$adapters" | awk '$2 != "cpu" && $2 != "" && $0 !~ /llvmpipe|lavapipe|SwiftShader/ {print $1; exit}')
if [ -z "$gpu" ]; then
  log "error: no hardware GPU adapter: wgpu found only software adapters, or none."
  [ "$missing" = 1 ] && log "  The missing pieces above are the likely reason."
  log "  Not benchmarking a software adapter as if it were the GPU."
  exit 2
fi
log "benchmarking adapter $gpu: $(echo "$adapters" | awk -v i="$gpu" '$1 == i' | cut -d' ' -f3-)"

peak=()
[ -n "${GANGWAY_PEAK_GFLOPS:-}" ] && peak=(--peak-gflops "$GANGWAY_PEAK_GFLOPS")
status=0
step() { # name, seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.out" 2>&1
  local rc=$?
  log "$name: exit $rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || { status=3; tail -5 "$out/$name.out" | tee -a "$out/check.log"; }
}
step quick 100 "$bin" bench --quick --adapters "$gpu" "${peak[@]}" \
  --json "$out/quick.json" --markdown "$out/quick.md"
step matmul 280 "$bin" bench matmul --adapters "$gpu" "${peak[@]}" --warmup 2 --samples 5 \
  --matmul-sizes 1024,2048,4096 --json "$out/matmul.json" --markdown "$out/matmul.md"
[ -f "$out/matmul.md" ] && cat "$out/matmul.md" | tee -a "$out/check.log"
step webgpu-limits 60 env GANGWAY_LIMITS=webgpu "$bin" bench matmul attention moe --quick \
  --adapters "$gpu" --json "$out/webgpu-limits.json" --markdown "$out/webgpu-limits.md"
if [ -f "$out/webgpu-limits.md" ]; then
  cases=$(grep -c '^| [a-z]' "$out/webgpu-limits.md")
  log "webgpu-limits: $((cases - 1)) cases, $(grep -c '| failed |' "$out/webgpu-limits.md") failed, \
$(grep -c '| skipped |' "$out/webgpu-limits.md") skipped"
fi
step dispatch 60 "$bin" --virtual-devices 4 bench dispatch --adapters "$gpu" \
  --json "$out/dispatch.json" --markdown "$out/dispatch.md"
pipelines=$(mktemp -d)
for start in empty filled; do
  step "start-$start" 45 env GANGWAY_CACHE_DIR="$pipelines" GANGWAY_AUTOTUNE=off bash -c \
    'TIMEFORMAT="CPU %U s user, %S s sys, %R s wall"; time "$@" > /dev/null' _ \
    "$bin" --backends vulkan --virtual-devices 4 train moe --devices 4 --steps 1 --eval-every 0
  log "start-$start: $(tail -1 "$out/start-$start.out")"
done
log "pipeline cache after: $(ls -l "$pipelines"/pipelines 2>/dev/null | tail -n +2 | tr '\n' ' ')"
log "wrote: $(cd "$out" && ls | tr '\n' ' ')"
exit $status
