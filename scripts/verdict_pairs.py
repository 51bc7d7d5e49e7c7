#!/usr/bin/env python3
"""How often `gangway bench compare` flags identical runs, and how often it catches a real 20%
slowdown: the book's "Verdicts that hold" table (docs/src/measurements/development-machine.md).

Each round runs `bench matmul --quick --backends vulkan` four times at the default sampling
(5 samples, 2 warm-up runs): a pair of identical runs, and a pair whose second run is really
20% slower (GANGWAY_BENCH_SLOWDOWN=1.2, test-only), then one pair of plain `--quick` runs (3
samples). Every pair is compared with `bench compare`, and its verdicts counted.

`--load N` runs a load generator beside the benchmark, as other people's builds come and go:
up to N busy processes for 1-4 s, then none for 1-4 s, at random (seeded). The book's rows used
`--load 0`, `--load 2` (1-2 processes) and `--load 4` (2-4).

    python3 scripts/verdict_pairs.py --gangway target/debug/gangway --rounds 10 --load 2
"""

import argparse
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time


def burn(stop):
    while not stop.is_set():
        sum(range(100_000))


def bursts(most, seed, quit_flag):
    """Busy processes on and off at random until `quit_flag` is set."""
    rng = random.Random(seed)
    choices = [1, 2, 2] if most <= 2 else [2, 3, 4]
    while not quit_flag.is_set():
        stop = multiprocessing.Event()
        procs = [multiprocessing.Process(target=burn, args=(stop,)) for _ in range(rng.choice(choices))]
        for p in procs:
            p.start()
        time.sleep(rng.uniform(1, 4))
        stop.set()
        for p in procs:
            p.join()
        time.sleep(rng.uniform(1, 4))


def run(gangway, out, sampling, slowdown):
    env = dict(os.environ)
    env.pop("GANGWAY_BENCH_SLOWDOWN", None)
    if slowdown:
        env["GANGWAY_BENCH_SLOWDOWN"] = slowdown
    cmd = [gangway, "bench", "matmul", "--quick", "--backends", "vulkan", *sampling, "--json", out]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def verdicts(gangway, old, new):
    table = subprocess.run(
        [gangway, "bench", "compare", old, new], check=True, capture_output=True, text=True
    ).stdout
    rows = [l for l in table.splitlines() if l.startswith("| matmul")]
    count = lambda v: sum(1 for l in rows if f"| {v} |" in l)
    return {v: count(v) for v in ["SLOWER", "FASTER", "no change", "too few samples"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gangway", default="target/debug/gangway")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--load", type=int, default=0, help="most busy processes beside it (0: none)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    quit_flag = multiprocessing.Event()
    loader = None
    if args.load > 0:
        loader = multiprocessing.Process(target=bursts, args=(args.load, args.seed, quit_flag))
        loader.start()
    default = ["--samples", "5", "--warmup", "2"]
    kinds = {
        "identical, default sampling": (default, None),
        "20% slower, default sampling": (default, "1.2"),
        "identical, --quick": ([], None),
    }
    totals = {k: {} for k in kinds}
    try:
        with tempfile.TemporaryDirectory() as d:
            for r in range(1, args.rounds + 1):
                for kind, (sampling, slowdown) in kinds.items():
                    a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
                    run(args.gangway, a, sampling, None)
                    run(args.gangway, b, sampling, slowdown)
                    for v, n in verdicts(args.gangway, a, b).items():
                        totals[kind][v] = totals[kind].get(v, 0) + n
                print(f"round {r} done, load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    finally:
        quit_flag.set()
        if loader:
            loader.join()
    for kind, t in totals.items():
        cases = sum(t.values())
        flagged = t.get("SLOWER", 0) + t.get("FASTER", 0)
        print(f"{kind}: {cases} cases, SLOWER {t.get('SLOWER', 0)}, FASTER {t.get('FASTER', 0)}, "
              f"no change {t.get('no change', 0)}, too few samples {t.get('too few samples', 0)} "
              f"({100 * flagged / max(cases, 1):.1f}% flagged)")


if __name__ == "__main__":
    main()
