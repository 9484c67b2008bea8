"""Benchmark `gpuwarden scan --source snapshot:FILE` on generated snapshots of 100k and 300k
resources, beside a bare `json.load` and `orjson.loads` of the same file in the same run.

    python bench/bench_snapshot_scan.py                     # -n 100000 -n 300000, --repeat 1
    python bench/bench_snapshot_scan.py -n 20000 --repeat 3

Each case runs in a fresh process; its wall time (start-up included), CPU time (user + system)
and peak RSS (the child's own, see bench_check_plan.run_child) are reported. Targets:
at 100k the scan's CPU ≤ 8× the `json.load` of the same file and ≤ 600 MiB; at 300k ≤ 1.5 GiB
and time linear in the resources (per-resource CPU within 1.3× of the 100k figure).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_check_plan import Run, median_run
from gen_snapshot import OUT_DIR

NOW = "2026-06-17T14:30:00Z"
TARGET_RATIO = 8.0
TARGET_PEAK_MIB = {100_000: 600.0, 300_000: 1536.0}
LINEAR_SLACK = 1.3


@dataclass(frozen=True)
class Measured:
    resources: int
    size_mb: float
    json_load: Run
    orjson_loads: Run
    scan: Run


def prepare(resources: int, seed: int) -> Path:
    """Generated in a child process, so this process never holds a big bundle (peak RSS)."""
    path = OUT_DIR / f"snapshot-{resources}-{seed}.json"
    if not path.exists():
        subprocess.run([sys.executable, str(Path(__file__).with_name("gen_snapshot.py")),
                        "-n", str(resources), "--seed", str(seed), "-o", str(path)], check=True)
    return path


def json_load(path: Path) -> list[str]:
    return [sys.executable, "-c", f"import json; json.load(open({str(path)!r}, 'rb'))"]


def orjson_loads(path: Path) -> list[str]:
    return [sys.executable, "-c",
            f"import orjson; orjson.loads(open({str(path)!r}, 'rb').read())"]


def scan(path: Path) -> list[str]:
    """`python -m engine` from the checkout (the child runs in it), so the code measured is
    the checkout's whichever copy an editable install points at."""
    return [sys.executable, "-m", "engine", "scan", "--source", f"snapshot:{path}",
            "--format", "json", "--now", NOW, "-o", os.devnull]


def measure(resources: int, seed: int, repeat: int) -> Measured:
    path = prepare(resources, seed)
    return Measured(resources, path.stat().st_size / 1e6, median_run(json_load(path), repeat),
                    median_run(orjson_loads(path), repeat), median_run(scan(path), repeat))


def verdicts(results: list[Measured]) -> list[str]:
    problems = []
    for m in results:
        ratio = m.scan.cpu_s / m.json_load.cpu_s
        if m.resources <= 100_000 and ratio > TARGET_RATIO:
            problems.append(f"{m.resources}: CPU {ratio:.1f}x json.load (target <= {TARGET_RATIO})")
        limit = next((mib for size, mib in sorted(TARGET_PEAK_MIB.items())
                      if m.resources <= size), None)
        if limit is not None and m.scan.peak_mib > limit:
            problems.append(f"{m.resources}: peak {m.scan.peak_mib:.0f} MiB (target <= {limit})")
    if len(results) >= 2:
        small, large = results[0], results[-1]
        growth = (large.scan.cpu_s / large.resources) / (small.scan.cpu_s / small.resources)
        if growth > LINEAR_SLACK:
            problems.append(f"per-resource CPU grows {growth:.2f}x from {small.resources} to "
                            f"{large.resources} (target <= {LINEAR_SLACK})")
    return problems


def print_table(results: list[Measured], repeat: int) -> None:
    print(f"snapshot scan, median of {repeat}; CPU = user + system of the child")
    print(f"{'case':<34} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9} {'µs/res CPU':>11} "
          f"{'x json.load':>11}")
    for m in results:
        for label, run in (("json.load", m.json_load), ("orjson.loads", m.orjson_loads),
                           ("gpuwarden scan", m.scan)):
            case = f"{label} {m.resources} ({m.size_mb:.0f} MB)"
            print(f"{case:<34} {run.wall_s:>8.2f} {run.cpu_s:>8.2f} {run.peak_mib:>9.0f} "
                  f"{run.cpu_s / m.resources * 1e6:>11.1f} "
                  f"{run.cpu_s / m.json_load.cpu_s:>11.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--resources", type=int, action="append")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    sizes = sorted(args.resources or [100_000, 300_000])
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = [measure(size, args.seed, args.repeat) for size in sizes]
    print_table(results, args.repeat)
    problems = verdicts(results)
    for problem in problems:
        print(f"OVER: {problem}")
    if problems:
        raise SystemExit(1)
    print("targets met")


if __name__ == "__main__":
    main()
