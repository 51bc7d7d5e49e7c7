#!/usr/bin/env python3
"""The Transformer of `gangway train lm`, rebuilt in NumPy from the description alone (the
book's Transformer guide, docs/src/guide/transformer.md), on weights `gangway export` wrote:
a check that the file and the description are enough to get gangway's logits elsewhere.

    python3 scripts/transformer_numpy.py model.safetensors --prompt "The " --max-bytes 40

prints the greedy continuation (the most likely byte each time), which must equal
`gangway generate --checkpoint model.safetensors --prompt "The " --max-bytes 40 --temperature 0`.
Needs numpy and safetensors (pip install numpy safetensors).
"""

import argparse
import json
import math

import numpy as np
from safetensors import safe_open


def load(path):
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata() or {}
        weights = {name: f.get_tensor(name).astype(np.float64) for name in f.keys()}
    return json.loads(meta["gangway.config"]), weights


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def moe(cfg, w, l, f):
    """The expert layer over one routing group (here: the one sequence)."""
    n, e_n, k = f.shape[0], cfg["experts"], cfg["top_k"]
    p = softmax(f @ w[f"layers.{l}.moe.router"])
    # top-k, lowest index on ties: argsort of -p is stable.
    order = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    # The capacity as gangway computes it (the factor as written, then a ceiling).
    capacity = math.ceil(k * n * float(str(np.float32(cfg["capacity_factor"]))) / e_n - 1e-9)
    demand = [0] * e_n
    kept = np.zeros((n, k), dtype=bool)
    for c in range(k):  # all first choices, in token order, before any second choice
        for t in range(n):
            e = order[t, c]
            kept[t, c] = demand[e] < capacity
            demand[e] += 1
    y = np.zeros_like(f)
    for t in range(n):
        gates = p[t, order[t]]
        if k == 2 and cfg["normalize_gates"]:
            gates = gates / gates.sum()
        for c in range(k):
            if kept[t, c]:
                e = order[t, c]
                o = gelu(f[t] @ w[f"layers.{l}.moe.w1"][e]) @ w[f"layers.{l}.moe.w2"][e]
                y[t] += gates[c] * o
    return y


def logits(cfg, w, ids):
    d, heads = cfg["model"], cfg["heads"]
    dh, n = d // heads, len(ids)
    h = w["tok_emb"][ids] + w["pos_emb"][:n]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(cfg["layers"]):
        at = lambda name: w[f"layers.{l}.{name}"]
        a = layer_norm(h, at("ln1.weight"), at("ln1.bias"), cfg["eps"])
        q, k, v = a @ at("attn.wq"), a @ at("attn.wk"), a @ at("attn.wv")
        o = np.zeros_like(q)
        for j in range(heads):
            s = slice(j * dh, (j + 1) * dh)
            scores = q[:, s] @ k[:, s].T / math.sqrt(dh) + mask
            o[:, s] = softmax(scores) @ v[:, s]
        h = h + o @ at("attn.wo")
        f = layer_norm(h, at("ln2.weight"), at("ln2.bias"), cfg["eps"])
        moe_every = cfg["moe_every"]
        if moe_every > 0 and l % moe_every == moe_every - 1:
            h = h + moe(cfg, w, l, f)
        else:
            h = h + gelu(f @ at("ffn.w1")) @ at("ffn.w2")
    z = layer_norm(h, w["ln_f.weight"], w["ln_f.bias"], cfg["eps"])
    head = w["tok_emb"].T if cfg["tied"] else w["head"]
    return z @ head


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("weights")
    ap.add_argument("--prompt", default="")
    ap.add_argument("--max-bytes", type=int, default=40)
    args = ap.parse_args()
    cfg, w = load(args.weights)
    text = list(args.prompt.encode()) or [ord("\n")]
    out = []
    for _ in range(args.max_bytes):
        window = text[-cfg["context"] :]
        b = int(np.argmax(logits(cfg, w, np.array(window))[-1]))
        out.append(b)
        text.append(b)
    print(args.prompt.encode().decode("utf-8", "replace") + bytes(out).decode("utf-8", "replace"))


if __name__ == "__main__":
    main()
