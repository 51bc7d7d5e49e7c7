#!/usr/bin/env python3
"""Writes Transformer weights as another tool would: NumPy arrays in a safetensors file written
by hand (no gangway metadata, no checksum), under the names and shapes of the book's Transformer
guide (docs/src/guide/transformer.md), with the configuration beside it as JSON.

    python3 scripts/foreign_weights.py tests/fixtures/foreign

writes `tiny.safetensors` and `tiny.config.json` there: the fixture `tests/transformer.rs`
fine-tunes (`train lm --init tiny.safetensors --config tiny.config.json` takes the same pair).
Each value is a formula of its tensor's name and its row-major index (`value` below), so the
test can tell that every tensor was read under its name and in NumPy's layout. Needs numpy only.
"""

import json
import math
import os
import struct
import sys

import numpy as np

CONFIG = {
    "context": 5,
    "model": 8,
    "heads": 2,
    "layers": 2,
    "hidden": 12,
    "expert_hidden": 6,
    "moe_every": 2,
    "experts": 2,
    "top_k": 2,
    "capacity_factor": 1.0,
    "normalize_gates": True,
    "aux_alpha": 0.5,
    "z_loss": 0.1,
    "tied": False,
    "eps": 1e-5,
    "seed": 0,
}


def tensors(cfg):
    """(name, shape) in the guide's order."""
    d, t, v = cfg["model"], cfg["context"], 256
    d_e = cfg["expert_hidden"] or cfg["hidden"]
    out = [("tok_emb", (v, d)), ("pos_emb", (t, d))]
    for l in range(cfg["layers"]):
        p = f"layers.{l}"
        out += [(f"{p}.ln1.weight", (d,)), (f"{p}.ln1.bias", (d,))]
        out += [(f"{p}.attn.{w}", (d, d)) for w in ("wq", "wk", "wv", "wo")]
        out += [(f"{p}.ln2.weight", (d,)), (f"{p}.ln2.bias", (d,))]
        if cfg["moe_every"] and l % cfg["moe_every"] == cfg["moe_every"] - 1:
            e = cfg["experts"]
            out += [
                (f"{p}.moe.router", (d, e)),
                (f"{p}.moe.w1", (e, d, d_e)),
                (f"{p}.moe.w2", (e, d_e, d)),
            ]
        else:
            out += [(f"{p}.ffn.w1", (d, cfg["hidden"])), (f"{p}.ffn.w2", (cfg["hidden"], d))]
    out += [("ln_f.weight", (d,)), ("ln_f.bias", (d,))]
    if not cfg["tied"]:
        out.append(("head", (d, v)))
    return out


def value(name, index):
    """The value at row-major `index` of tensor `name`: LayerNorm gains about 1, everything
    else about 0, large enough that attention is not uniform and the experts' routes differ."""
    phase = sum(name.encode()) % 97 * 0.1
    wave = math.sin(0.37 * index + phase)
    if name.endswith(".weight"):
        return 1.0 + 0.3 * wave
    return 0.3 * wave if name.endswith(".bias") else 0.4 * wave


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    arrays = []
    for name, shape in tensors(CONFIG):
        n = math.prod(shape)
        flat = np.array([value(name, i) for i in range(n)], dtype=np.float64)
        arrays.append((name, flat.astype("<f4").reshape(shape)))
    # safetensors: an 8-byte little-endian header length, the JSON header (padded to 8 bytes
    # with spaces), then the tensors' bytes at the offsets the header gives.
    header, offset = {}, 0
    for name, a in arrays:
        header[name] = {
            "dtype": "F32",
            "shape": list(a.shape),
            "data_offsets": [offset, offset + a.nbytes],
        }
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(out_dir, "tiny.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, a in arrays:
            f.write(a.tobytes(order="C"))
    with open(os.path.join(out_dir, "tiny.config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/foreign")
