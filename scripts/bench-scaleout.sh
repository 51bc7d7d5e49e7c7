#!/usr/bin/env bash
# `gangway bench scaleout` over the same four devices as 1 process × 4, 2 ranks × 2 and 4 ranks
# × 1 (virtual devices of one adapter), interleaved round by round so that a noisy machine hits
# every setup alike, then one Markdown table: tokens/s of the MoE step against 1 process × 4
# devices, the collectives' exposed share, and the exchange times.
#
#   scripts/bench-scaleout.sh [ROUNDS] [OUT_DIR]      (defaults: 3, target/scaleout)
#
# Needs a release build with MPI: cargo build --release --features mpi (and OpenMPI's mpirun).
# Extra flags for gangway go in GANGWAY_FLAGS (default: --backends vulkan).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
out=${2:-target/scaleout}
bin=target/release/gangway
flags=${GANGWAY_FLAGS:---backends vulkan}
[ -x "$bin" ] || { echo "build first: cargo build --release --features mpi" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "mpirun is missing (apt-get install openmpi-bin)" >&2; exit 1; }
mkdir -p "$out"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
# As root on a small machine OpenMPI needs these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
mpi=(mpirun --bind-to none --oversubscribe)
for r in $(seq "$rounds"); do
  for setup in 1x4 2x2 4x1; do
    ranks=${setup%x*}; per=${setup#*x}
    echo "round $r: $ranks rank(s) × $per device(s)" >&2
    cmd=("$bin" $flags --virtual-devices "$per" bench scaleout --samples 9
         --json "$out/$setup-$r.json")
    if [ "$ranks" = 1 ]; then "${cmd[@]}" >/dev/null; else "${mpi[@]}" -np "$ranks" "${cmd[@]}" >/dev/null; fi
  done
done
python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for setup in ["1x4", "2x2", "4x1"]:
    for r in range(1, rounds + 1):
        rep = json.load(open(f"{out}/{setup}-{r}.json"))
        for c in rep["results"]:
            if c["status"] != "ok":
                continue
            key = (setup, c["case"])
            rows.setdefault(key, []).append(c)
def med(cases, f):
    return statistics.median(f(c) for c in cases)
step = {s: [c for (k, name), cs in rows.items() if k == s and name.startswith("moe step") for c in cs] for s in ["1x4", "2x2", "4x1"]}
base = med(step["1x4"], lambda c: c["figure"]["value"])
print("| setup | MoE step tokens/s (median of rounds) | vs 1 process × 4 | collectives exposed | all-to-all share | all-reduce share |")
print("| --- | --- | --- | --- | --- | --- |")
for s, label in [("1x4", "1 process × 4 devices"), ("2x2", "2 ranks × 2 devices"), ("4x1", "4 ranks × 1 device")]:
    cs = step[s]
    tps = med(cs, lambda c: c["figure"]["value"])
    m = lambda k: med(cs, lambda c: c["metrics"].get(k, float("nan")))
    print(f"| {label} | {tps:.0f} | {tps / base:.2f}× | {m('collectives exposed'):.2f} | {m('all-to-all share'):.2f} | {m('all-reduce share'):.2f} |")
print()
print("| exchange (every rank to every other) | 2 ranks: median time | 2 ranks: GB/s sent per rank | 4 ranks: median time | 4 ranks: GB/s sent per rank |")
print("| --- | --- | --- | --- | --- |")
sizes = sorted({int(name.split()[1]) for (s, name) in rows if name.startswith("exchange")})
for b in sizes:
    cells = []
    for s, ranks in [("2x2", 2), ("4x1", 4)]:
        cs = rows.get((s, f"exchange {b} B over {ranks} ranks"), [])
        if cs:
            t = med(cs, lambda c: c["stats"]["median_s"])
            g = med(cs, lambda c: c["figure"]["value"])
            cells += [f"{t * 1e6:.0f} µs", f"{g:.3f}"]
        else:
            cells += ["–", "–"]
    print(f"| {b} B | " + " | ".join(cells) + " |")
EOF
