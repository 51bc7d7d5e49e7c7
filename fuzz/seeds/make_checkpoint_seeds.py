#!/usr/bin/env python3
"""Writes small valid checkpoints (both formats; see src/moe/params.rs and
src/moe/train/checkpoint.rs) to seeds/checkpoint/, so the fuzzer starts from files the
parsers accept. Values are small, finite and non-negative (valid second moments)."""
import json, os, random, struct, zlib

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoint")

def specs(c):
    ctx, de, d, ff, e = c["context"], c["embed"], c["model"], c["hidden"], c["experts"]
    out = [("embed", [256, de]), ("w_in", [ctx * de, d])]
    for l in range(c["blocks"]):
        out += [(f"blocks.{l}.dense", [d, d]), (f"blocks.{l}.router", [d, e]),
                (f"blocks.{l}.w1", [e, d, ff]), (f"blocks.{l}.w2", [e, ff, d])]
    return out + [("w_out", [d, 256])]

def tensors(c, prefix, rng):
    out = b""
    for name, shape in specs(c):
        name = (prefix + name).encode()
        n = 1
        for s in shape:
            n *= s
        out += struct.pack("<I", len(name)) + name + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", s) for s in shape)
        out += b"".join(struct.pack("<f", rng.random() * 0.1) for _ in range(n))
    return out

def sealed(magic, header, count, body):
    out = magic + struct.pack("<I", 2) + struct.pack("<I", len(header)) + header
    out += struct.pack("<I", count) + body
    return out + struct.pack("<I", zlib.crc32(out[8:]) & 0xFFFFFFFF)

def main():
    os.makedirs(HERE, exist_ok=True)
    rng = random.Random(1)
    for i, blocks in enumerate([0, 1]):
        c = dict(context=1, embed=1, model=2, hidden=1, experts=2, top_k=1,
                 capacity_factor=1.25, blocks=blocks, aux_alpha=0.01, z_loss=0.0,
                 normalize_gates=True, seed=0)
        n = len(specs(c))
        header = json.dumps(dict(config=c, adam=dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8),
                                 step=3, groups=1)).encode()
        body = tensors(c, "", rng) + tensors(c, "adam.m.", rng) + tensors(c, "adam.v.", rng)
        with open(os.path.join(HERE, f"trainer{i}.ckpt"), "wb") as f:
            f.write(sealed(b"GWMOETR\0", header, 3 * n, body))
        with open(os.path.join(HERE, f"elm{i}.ckpt"), "wb") as f:
            f.write(sealed(b"GWMOELM\0", json.dumps(c).encode(), n, tensors(c, "", rng)))

main()
