#!/usr/bin/env python3
"""What a watcher costs a job: host CPU per step of `gangway train moe`, alone and with
`--live` and a `gangway watch` attached, on D devices (virtual devices of one adapter).

Runs are interleaved (alone, watched, alone, watched, ...) so that load on a shared machine
moves both sides; each run's CPU is the job's own user + system time (os.wait4), divided by
its steps. Prints each pair and the median ratio watched / alone. The watcher's own CPU is not
counted: it is another process, possibly on another machine.

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


def watched(gangway, args):
    proc = subprocess.Popen(
        [args[0], "--live", "127.0.0.1:0", *args[1:]],
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
    a = p.parse_args()
    print(f"# {time.strftime('%Y-%m-%d')}, {a.gangway}, {a.backend}, {a.steps} steps, "
          f"{a.runs} interleaved pairs")
    print("| D | CPU per step alone (ms, median) | watched (ms, median) | ratio (median of pairs) |")
    print("| --- | --- | --- | --- |")
    for d in a.devices:
        args = job_args(a.gangway, a.backend, d, a.steps)
        pairs = []
        for _ in range(a.runs):
            base = alone(args) / a.steps
            live = watched(a.gangway, args) / a.steps
            pairs.append((base, live))
            print(f"  D={d}: alone {base * 1e3:.2f} ms, watched {live * 1e3:.2f} ms, "
                  f"{live / base:.3f}x", file=sys.stderr)
        ratio = statistics.median(l / b for b, l in pairs)
        print(f"| {d} | {statistics.median(b for b, _ in pairs) * 1e3:.2f} | "
              f"{statistics.median(l for _, l in pairs) * 1e3:.2f} | {ratio:.3f}x |")


if __name__ == "__main__":
    main()
