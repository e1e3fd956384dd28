"""The paper's SGD run on the overlaps on one JAX device against the command line's split, one device per core.

The run of `flowsim reproduce`'s SGD experiment (d = 80, L = 10, batch 5, 200 000 steps, 30 seeds, lr 1e-3,
lam = 2 / (1 + 1e-4 step), eps = 0.1, sphere starts, logged every 1 000 steps; `run_sgd(..., engine="overlaps")`,
whose seeds are split over the devices). Each device count runs in a process of its own (the split is fixed when
JAX starts), the two alternated `--rounds` times in this one command; in each, the first call (compiling) and the
fastest of `--repeats` later calls are timed.

Usage: python benchmarks/chain_devices.py [--quick] [--rounds 2] [--repeats 2] [--devices 2]
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 000 steps, one round: a smoke test")
    parser.add_argument("--rounds", type=int, default=2, help="times each device count runs, alternated")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls after the compiling one (fastest kept)")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    parser.add_argument("--devices", type=int, default=cores, help="the split (default: the cores)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)  # steps, in a child process
    args = parser.parse_args()
    if args.quick:
        args.rounds = 1
    if min(args.rounds, args.repeats, args.devices) < 1:
        parser.error("--rounds, --repeats and --devices must be at least 1")
    return args


def child(steps: int, repeats: int) -> None:
    """In a process whose device count the parent set: time the run, print one JSON line."""
    import jax
    from overlap_sgd import _paper_run  # a sibling script
    from sgd_cost import machine, timed

    first, best = timed(lambda: _paper_run("overlaps", steps, 0), repeats)
    print(json.dumps({"devices": jax.device_count(), "first": first, "best": best, "machine": machine()}))


def measure(devices: int, steps: int, repeats: int) -> dict:
    # XLA_FLAGS without a device count of its own, which would override FLOWSIM_HOST_DEVICES in both processes.
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f)
    environment = {**os.environ, "XLA_FLAGS": flags, "FLOWSIM_HOST_DEVICES": str(devices), "JAX_PLATFORMS": "cpu"}
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from flowsim.devices import use_host_cores; use_host_cores(); "
        "import chain_devices; chain_devices.child(int(sys.argv[2]), int(sys.argv[3]))"
    )
    command = [sys.executable, "-c", code, str(HERE), str(steps), str(repeats)]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if result.returncode:
        raise SystemExit(f"the {devices}-device process failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    args = parse_args()
    steps = 20_000 if args.quick else 200_000
    print(f"# the paper's SGD run on the overlaps, {steps} steps x 30 seeds; load average {os.getloadavg()[0]:.2f}")
    rows = []
    for round_ in range(1, args.rounds + 1):
        for devices in (1, args.devices):
            row = measure(devices, steps, args.repeats)
            rows.append(row)
            print(
                f"round {round_}: {row['devices']} device(s): "
                f"first call {row['first']:.2f} s, best {row['best']:.2f} s",
                flush=True,
            )
    print(f"# machine: {rows[0]['machine']}")
    one = min(row["best"] for row in rows if row["devices"] == 1)
    split = min(row["best"] for row in rows if row["devices"] == args.devices)
    print(f"best: one device {one:.2f} s, {args.devices} devices {split:.2f} s: {one / split:.2f}x")
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
