#!/usr/bin/env python3
"""What serving live and a watcher cost a job: host CPU per step of `gangway train moe`
alone, with `--live` and no watcher, and with `--live` and a `gangway watch` attached, on D
devices (virtual devices of one adapter).

Runs are interleaved (alone, served, watched, alone, ...) so that load on a shared machine
moves every side; each run's CPU is the job's own user + system time (os.wait4), divided by
its steps. Prints each triple and the medians of the per-triple ratios. The watcher's own CPU
is not counted: it is another process, possibly on another machine. `--metrics-only` serves
with `--live-metrics-only` (no tracer, no events).

    python3 scripts/live_overhead.py --gangway target/release/gangway --devices 1 4 --runs 5
"""

import argparse
import os
import statistics
import subprocess
import sys
import time


def job_args(gangway, backend, devices, steps):
    return [
        gangway, "--backends", backend, "--virtual-devices", str(max(devices, 1)),
        "train", "moe", "--devices", str(devices), "--steps", str(steps),
        "--batch", "64", "--eval-every", "0",
    ]


def cpu_of(proc):
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"the job failed: {proc.args}")
    return usage.ru_utime + usage.ru_stime


def alone(args):
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cpu_of(proc)


LIVE = ["--live", "127.0.0.1:0"]


def served(args):
    proc = subprocess.Popen(
        [args[0], *LIVE, *args[1:]],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return cpu_of(proc)


def watched(gangway, args):
    proc = subprocess.Popen(
        [args[0], *LIVE, *args[1:]],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    first = proc.stderr.readline().strip()
    addr = first.rsplit(" ", 1)[-1]
    watcher = subprocess.Popen(
        [gangway, "watch", addr], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    # Drain the job's stderr so it never blocks on a full pipe.
    proc.stderr.read()
    cpu = cpu_of(proc)
    watcher.wait(timeout=30)
    return cpu


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gangway", default="target/release/gangway")
    p.add_argument("--backend", default="vulkan")
    p.add_argument("--devices", type=int, nargs="+", default=[1, 4])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--metrics-only", action="store_true")
    a = p.parse_args()
    if a.metrics_only:
        LIVE.append("--live-metrics-only")
    print(f"# {time.strftime('%Y-%m-%d')}, {a.gangway}, {a.backend}, {a.steps} steps, "
          f"{a.runs} interleaved triples, serving {' '.join(LIVE)}")
    print("| D | CPU per step alone (ms) | served, no watcher | watched | served / alone | "
          "watched / served |")
    print("| --- | --- | --- | --- | --- | --- |")
    for d in a.devices:
        args = job_args(a.gangway, a.backend, d, a.steps)
        runs = []
        for _ in range(a.runs):
            base = alone(args) / a.steps
            live = served(args) / a.steps
            seen = watched(a.gangway, args) / a.steps
            runs.append((base, live, seen))
            print(f"  D={d}: alone {base * 1e3:.2f} ms, served {live * 1e3:.2f} ms, "
                  f"watched {seen * 1e3:.2f} ms", file=sys.stderr)
        med = statistics.median
        print(f"| {d} | {med(r[0] for r in runs) * 1e3:.2f} | {med(r[1] for r in runs) * 1e3:.2f} "
              f"| {med(r[2] for r in runs) * 1e3:.2f} | {med(r[1] / r[0] for r in runs):.3f}x "
              f"| {med(r[2] / r[1] for r in runs):.3f}x |")


if __name__ == "__main__":
    main()
