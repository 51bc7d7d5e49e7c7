#!/usr/bin/env bash
# The Switch-Transformer-vs-T5 comparison at small scale, on the bundled corpora: the same
# Transformer with every other FFN an expert layer (top-1, so each token's FFN compute equals the
# dense model's), against the dense model, for the same steps, batch and data. Prints a Markdown
# table: parameters, tokens/s, and validation bits per byte at each evaluation.
#
#   scripts/moe-vs-dense.sh [STEPS] [extra train lm flags...]
#
# Uses target/release/gangway (built if missing). Each run's JSON report is kept in $OUT
# (default: a temporary directory).
set -euo pipefail
steps=${1:-600}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/gangway
[ -x "$bin" ] || cargo build --release --quiet --manifest-path "$root/Cargo.toml" --bin gangway
out=${OUT:-$(mktemp -d)}
common=(--steps "$steps" --batch 8 --context 64 --d-model 64 --heads 4 --hidden 256 --layers 2
  --eval-every $((steps / 3)) --eval-sequences 128 "$@")
"$bin" train lm "${common[@]}" --moe-every 2 --experts 4 --top-k 1 --json "$out/moe.json" >&2
"$bin" train lm "${common[@]}" --moe-every 0 --json "$out/dense.json" >&2
python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
runs = [("MoE: every other FFN 4 experts, top-1", "moe"), ("dense", "dense")]
reports = {key: json.load(open(f"{out}/{key}.json")) for _, key in runs}
steps = [s for s, _ in reports["dense"]["valid"]]
print("| model | parameters | tokens/s | " + " | ".join(f"valid bits/byte @ {s}" for s in steps) + " |")
print("| --- | --- | --- | " + " | ".join("---" for _ in steps) + " |")
for name, key in runs:
    r = reports[key]
    cells = " | ".join(f"{b:.3f}" for _, b in r["valid"])
    print(f"| {name} | {r['parameters']} | {r['tokens_per_s']:.0f} | {cells} |")
ratio = reports["moe"]["tokens_per_s"] / reports["dense"]["tokens_per_s"]
print(f"\nMoE speed / dense speed: {ratio:.2f}x; "
      f"unigram baseline {reports['dense']['unigram_bpb']:.3f} bits/byte")
EOF
