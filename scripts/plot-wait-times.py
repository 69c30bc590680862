#!/usr/bin/env python3
"""Plots how long callers wait for a lock under contention, from a real run.

Runs examples/metrics_service.rs on one key with 2, 8 and 32 workers (each holding the lock
5-50 ms, then working 5-50 ms without it), collects every obtain's wait through the locker's observer (--samples), and
draws their distribution to docs/wait-times.png. The same numbers are what
distlock_obtain_duration_seconds records.

    python3 scripts/plot-wait-times.py            # the file backend, 10 s per run
    LOCK_URL=redis://127.0.0.1:6379/0 python3 scripts/plot-wait-times.py --seconds 20

Needs matplotlib (pip install matplotlib).
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot-wait-times: matplotlib is missing: pip install matplotlib")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(workers, seconds, out):
    cmd = ["cargo", "run", "--locked", "-q", "-p", "examples", "--example", "metrics_service", "--",
           "--workers", str(workers), "--keys", "1", "--seconds", str(seconds), "--samples", out]
    subprocess.run(cmd, cwd=ROOT, check=True)
    with open(out) as f:
        return [(r["result"], float(r["waited_s"])) for r in csv.DictReader(f)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10, help="length of each run")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "wait-times.png"))
    args = parser.parse_args()
    backend = os.environ.get("LOCK_URL", "file").split(":")[0]

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (2, 8, 32):
            samples = run(workers, args.seconds, os.path.join(tmp, f"{workers}.csv"))
            waits = sorted(max(w, 1e-5) * 1000 for _, w in samples)
            obtained = sum(1 for r, _ in samples if r == "obtained")
            timeouts = sum(1 for r, _ in samples if r == "timeout")
            share = [(i + 1) / len(waits) for i in range(len(waits))]
            p50, p99 = waits[len(waits) // 2], waits[min(len(waits) - 1, int(len(waits) * 0.99))]
            label = (f"{workers} workers: {obtained} obtained, {timeouts} timed out; "
                     f"p50 {p50:.1f} ms, p99 {p99:.0f} ms")
            ax.step(waits, share, where="post", label=label)
            print(label)
    ax.set_xscale("log")
    ax.set_xlabel("wait for the lock (ms, log scale)")
    ax.set_ylabel("share of obtains waiting at most that long")
    ax.set_title(f"Obtain wait under contention: one key, {backend} backend,\n"
                 f"holds of 5-50 ms, 2 s wait, {args.seconds} s per run")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
