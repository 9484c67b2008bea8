"""Benchmark `gpuwarden check-plan` end to end, beside a bare `json.load` of the same file.

Every case runs as a fresh subprocess (start-up included), `--repeat` times; the table shows
the median wall time and the peak RSS of that child (from `os.wait4`, so one run's memory never
leaks into another's figure). A last run under `python -X importtime` lists any provider SDK the
command imported (there must be none).

    python bench/bench_check_plan.py                 # 5,000 changes, 3 repeats
    python bench/bench_check_plan.py --changes 20000 --repeat 5
    python bench/bench_check_plan.py --profile       # where the time and the memory go

`--profile` runs check-plan once in process under cProfile (bench/out/check_plan.prof and the
top functions) and once under tracemalloc (the peak of Python allocations, and the lines that
hold most once the plan is normalized), instead of the timed runs.

Writes only under bench/out/ (generated plans and check_plan.json with the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_plan import OUT_DIR

REPO = Path(__file__).resolve().parent.parent
HEAVY_MODULES = ("boto3", "botocore", "google.cloud", "azure", "kubernetes", "pynvml")
TARGET_WALL_S = {"plan": 2.0, "empty": 1.0}
TARGET_PEAK_MIB = 150.0
# check-plan on the big plan against a bare `json.load` of the same file, in the same run
TARGET_RATIO = 4.0
GNU_TIME = "/usr/bin/time"


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float  # user + system: robust to other load on the machine, unlike wall time
    peak_mib: float
    exit_code: int


@dataclass(frozen=True)
class Row:
    case: str
    wall_s: float
    cpu_s: float
    peak_mib: float
    target: str
    baseline: str
    verdict: str


def run_child(command: list[str]) -> Run:
    """Run `command` once: wall time around the whole process, and the peak RSS of that process
    alone. Linux carries a parent's peak RSS over fork/exec into the child's `ru_maxrss`, so
    when GNU time is there it launches the command from its own small process."""
    rss_file = OUT_DIR / "rss.txt"
    wrapped = command
    if Path(GNU_TIME).exists():
        wrapped = [GNU_TIME, "-f", "%M", "-o", str(rss_file), *command]
    start = time.perf_counter()
    process = subprocess.Popen(wrapped, cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    assert process.stderr is not None
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    process.returncode = code
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {code}:\n{stderr.decode(errors='replace')}")
    peak_kib = int(rss_file.read_text().split()[-1]) if wrapped is not command else (
        usage.ru_maxrss)  # KiB on Linux
    cpu = usage.ru_utime + usage.ru_stime  # includes GNU time's reaped child
    return Run(wall, cpu, peak_kib / 1024, code)


def median_run(command: list[str], repeat: int) -> Run:
    runs = [run_child(command) for _ in range(repeat)]
    return Run(
        statistics.median(r.wall_s for r in runs),
        statistics.median(r.cpu_s for r in runs),
        statistics.median(r.peak_mib for r in runs),
        runs[-1].exit_code,
    )


def gpuwarden_command() -> list[str]:
    """`python -m engine` run in this checkout: the code measured is this checkout's, never
    whatever an installed `gpuwarden` script points at (an editable install elsewhere)."""
    return [sys.executable, "-m", "engine"]


def json_load_command(plan: Path) -> list[str]:
    return [sys.executable, "-c", f"import json; json.load(open({str(plan)!r}, 'rb'))"]


def check_plan_args(plan: Path) -> list[str]:
    return ["check-plan", str(plan), "--format", "json", "-o", os.devnull]


def heavy_imports(plan: Path) -> list[str]:
    """Provider SDK modules `check-plan` imported, from `-X importtime` (stderr)."""
    command = [sys.executable, "-X", "importtime", "-m", "engine", *check_plan_args(plan)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if result.returncode not in (0, 1):
        raise SystemExit(f"importtime run exited {result.returncode}:\n{result.stderr}")
    found = set()
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        name = line.rsplit("|", 1)[1].strip()
        for heavy in HEAVY_MODULES:
            if name == heavy or name.startswith(heavy + "."):
                found.add(heavy)
    return sorted(found)


def verdict(wall: float, wall_target: float, peak: float | None,
            ratio: float | None = None) -> str:
    ok = wall <= wall_target and (peak is None or peak <= TARGET_PEAK_MIB) and (
        ratio is None or ratio <= TARGET_RATIO)
    return "ok" if ok else "OVER"


def prepare_plans(changes: int, seed: int, plan: Path | None) -> tuple[Path, Path]:
    """Generate the plans in a child process: Linux carries a parent's peak RSS over fork and
    exec into the child's `ru_maxrss`, so this process must never hold a big plan itself."""
    generator = [sys.executable, str(Path(__file__).with_name("gen_plan.py"))]
    if plan is None:
        plan = OUT_DIR / f"plan-{changes}.json"
        subprocess.run([*generator, "-n", str(changes), "--seed", str(seed), "-o", str(plan)],
                       check=True)
    empty = OUT_DIR / "plan-empty.json"
    subprocess.run([*generator, "--empty", "-o", str(empty)], check=True,
                   stdout=subprocess.DEVNULL)
    return plan, empty


def count_changes(plan: Path) -> int:
    code = ("import json,sys; d=json.load(open(sys.argv[1],'rb')); "
            "print(len(d.get('resource_changes') or []))")
    result = subprocess.run([sys.executable, "-c", code, str(plan)], capture_output=True,
                            text=True, check=True)
    return int(result.stdout)


def measure(plan: Path, empty: Path, repeat: int, changes: int) -> tuple[list[Row], list[str]]:
    tool = gpuwarden_command()
    base_plan = median_run(json_load_command(plan), repeat)
    full = median_run([*tool, *check_plan_args(plan)], repeat)
    base_empty = median_run(json_load_command(empty), repeat)
    none = median_run([*tool, *check_plan_args(empty)], repeat)
    ratio = full.wall_s / base_plan.wall_s
    rows = [
        Row(f"json.load {changes} changes", base_plan.wall_s, base_plan.cpu_s, base_plan.peak_mib,
            "-", "-", "-"),
        Row(f"check-plan {changes} changes", full.wall_s, full.cpu_s, full.peak_mib,
            f"<={TARGET_RATIO:.0f}x json.load, <={TARGET_PEAK_MIB:.0f} MiB",
            f"{ratio:.1f}x json.load time ({full.cpu_s / base_plan.cpu_s:.1f}x its CPU)",
            verdict(full.wall_s, TARGET_WALL_S["plan"], full.peak_mib, ratio)),
        Row("json.load empty plan", base_empty.wall_s, base_empty.cpu_s, base_empty.peak_mib,
            "-", "-", "-"),
        Row("check-plan empty plan", none.wall_s, none.cpu_s, none.peak_mib, "<=1 s",
            f"+{none.wall_s - base_empty.wall_s:.2f} s over bare python",
            verdict(none.wall_s, TARGET_WALL_S["empty"], None)),
    ]
    imported = sorted(set(heavy_imports(plan)) | set(heavy_imports(empty)))
    return rows, imported


# Run in a fresh process: the catalog parses its files on first use, once per process.
CATALOG_PROBE = """
import json, time
t0 = time.perf_counter()
from engine.core.catalog import builtin_catalog
catalog = builtin_catalog()
t1 = time.perf_counter(); catalog.instance("p4d.24xlarge"); t2 = time.perf_counter()
catalog.instance("standard_nc6s_v3"); t3 = time.perf_counter()
names = ["g5.xlarge", "m5.large", "g9.mystery", "a2-highgpu-1g", "Standard_ND96asr_v4"] * 2000
for name in names:
    catalog.instance(name); catalog.hourly_price(name, "eu-west-1", "spot")
t4 = time.perf_counter(); len(catalog.instances); t5 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "first_aws": t2 - t1, "first_azure": t3 - t2,
                  "per_lookup": (t4 - t3) / len(names), "all_gpu_types": t5 - t4}))
"""


def catalog_rows() -> list[Row]:
    """Catalog figures: the first lookup (which parses the type table and finds one type's
    prices), the first Azure one, a lookup once cached, and every GPU type (Kubernetes pricing)."""
    out = subprocess.run([sys.executable, "-c", CATALOG_PROBE], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    figures = json.loads(out)
    def row(case: str, key: str, scale: float, unit: str) -> Row:
        return Row(case, figures[key], figures[key], 0.0, "-",
                   f"{figures[key] * scale:.2f} {unit}", "-")
    return [row("catalog: import module", "import", 1e3, "ms"),
            row("catalog: first lookup (AWS)", "first_aws", 1e3, "ms"),
            row("catalog: first Azure lookup", "first_azure", 1e3, "ms"),
            row("catalog: lookup + spot price, cached", "per_lookup", 1e6, "us"),
            row("catalog: every GPU type priced", "all_gpu_types", 1e3, "ms")]


def print_table(rows: list[Row], imported: list[str], repeat: int) -> None:
    header = ("case", "wall s", "cpu s", "peak MiB", "target", "vs baseline", "")
    table = [header] + [(r.case, f"{r.wall_s:.2f}", f"{r.cpu_s:.2f}", f"{r.peak_mib:.0f}",
                         r.target, r.baseline, r.verdict) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    print(f"median of {repeat} runs; python {platform.python_version()}, {os.cpu_count()} CPUs")
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
    heavy = ", ".join(imported) if imported else "none"
    print(f"provider SDKs imported by check-plan ({', '.join(HEAVY_MODULES)}): {heavy}")


PROFILE_PROBE = """
import cProfile, pstats, sys, tracemalloc
from engine.cli import main
plan, output, prof, top = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def run():
    sys.argv = ["gpuwarden", "check-plan", plan, "--format", "json", "-o", output]
    try:
        main()
    except SystemExit:
        pass
profile = cProfile.Profile()
profile.runcall(run)
profile.dump_stats(prof)
stats = pstats.Stats(profile, stream=sys.stdout)
stats.sort_stats("tottime").print_stats(top)
stats.sort_stats("cumulative").print_stats(top)
# Memory: a snapshot once the plan is normalized (document and resources both alive).
import engine.sources.terraform.cost_changes as cost_changes
normalize, snapshots = cost_changes.plan_inputs, []
def plan_inputs(*args, **kwargs):
    inputs = normalize(*args, **kwargs)
    snapshots.append(tracemalloc.take_snapshot())
    return inputs
cost_changes.plan_inputs = plan_inputs
tracemalloc.start(1)
run()
current, peak = tracemalloc.get_traced_memory()
print(f"tracemalloc: peak {peak / 2**20:.1f} MiB of Python allocations; once the plan is "
      "normalized, the lines holding most:")
for stat in snapshots[0].statistics("lineno")[:top]:
    print(f"  {stat.size / 2**20:7.1f} MiB  {stat.count:8d} blocks  {stat.traceback}")
"""


def profile(plan: Path, top: int) -> None:
    """check-plan once under cProfile and once under tracemalloc, in a child process."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", PROFILE_PROBE, str(plan), os.devnull,
                    str(OUT_DIR / "check_plan.prof"), str(top)], cwd=REPO, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--plan", type=Path, help="use this plan instead of a generated one")
    parser.add_argument("--profile", action="store_true",
                        help="profile check-plan (cProfile, tracemalloc) instead of timing it")
    parser.add_argument("--top", type=int, default=25, help="functions and lines --profile lists")
    args = parser.parse_args()
    plan, empty = prepare_plans(args.changes, args.seed, args.plan)
    if args.profile:
        profile(plan, args.top)
        return
    changes = count_changes(plan)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    rows, imported = measure(plan, empty, args.repeat, changes)
    rows += catalog_rows()
    print_table(rows, imported, args.repeat)
    (OUT_DIR / "check_plan.json").write_text(json.dumps(
        {"rows": [asdict(r) for r in rows], "heavy_imports": imported, "repeat": args.repeat,
         "plan_bytes": plan.stat().st_size}, indent=2) + "\n")
    if imported or any(r.verdict == "OVER" for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
