"""AWS scan benchmark (not a test: prints figures, asserts nothing).

Seeds a moto server on loopback with 2,000 EC2 instances (GPU and CPU types, on-demand and
spot, tagged for dev/prod, some missing cost tags) and 2,000 EBS volumes (half unencrypted), then
times, in the same run and against the same server:

- `gpuwarden scan --source aws` (engine.cli's entry point in a fresh interpreter, boto3
  through AWS_ENDPOINT_URL), whole process wall time including interpreter start-up;
- Cloud Custodian (`c7n`, installed into bench/out/c7n-venv on first use) with policies using
  equivalent filters on the same instances and volumes: `custodian run --dryrun --cache FILE
  -s OUT policy.yml` (the cache file removed before each run), by the venv's interpreter;
- for both, every botocore API call timed (a wrapper around `BaseClient._make_api_call`, so
  botocore's own response parsing counts as API time): the wall time outside any API call is
  the tool's own cost (start-up, imports, policy loading, normalizing, evaluating, rendering);
- the Lambda handler: `import engine.lambda_handler` beside `import boto3` (wall time of a
  fresh interpreter, and `-X importtime`'s cumulative figure), and one cold dry-run invocation.

gpuwarden reads more than the Custodian policies do (launch templates, autoscaling groups and
launch configurations, EKS node groups, SageMaker jobs/notebooks/endpoints, KMS aliases, the EBS
default-encryption setting); the API call counts are printed beside the times.

    python bench/bench_aws_scan.py [--instances 2000] [--volumes 2000] [--repeat 3]
                                   [--no-custodian] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"
REGION = "us-east-1"
AMI = "ami-12c6146b"
GPU_TYPES = ["p3.2xlarge", "g5.xlarge", "g4dn.xlarge", "p4d.24xlarge", "g5.12xlarge",
             "g6.xlarge"]
CPU_TYPES = ["m5.large", "c5.xlarge", "t3.medium"]


# ---------------------------------------------------------------------------- child: timed scan


def child_run(target: str, arguments: list[str]) -> None:
    """Run a command-line entry point (`module:function`) in this process with every botocore
    call timed; the intervals go to the file named by BENCH_TIMINGS when it exits. The same
    wrapper times gpuwarden and Cloud Custodian (run by the c7n venv's interpreter)."""
    started = time.perf_counter()
    from botocore.client import BaseClient

    lock = threading.Lock()
    intervals: list[tuple[float, float, str]] = []
    original = BaseClient._make_api_call

    def timed(self: Any, operation: str, params: Any) -> Any:
        begin = time.perf_counter()
        try:
            return original(self, operation, params)
        finally:
            with lock:
                intervals.append((begin, time.perf_counter(), operation))

    BaseClient._make_api_call = timed
    module_name, _, function = target.partition(":")
    sys.path.insert(0, str(REPO))
    import importlib

    entry = getattr(importlib.import_module(module_name), function)
    sys.argv = [module_name, *arguments]
    try:
        entry()
    finally:
        Path(os.environ["BENCH_TIMINGS"]).write_text(json.dumps(
            {"started": started, "ended": time.perf_counter(), "intervals": intervals}))


# ---------------------------------------------------------------------------- moto and seeding


def start_moto() -> tuple[Any, str]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def client_env(endpoint: str) -> dict[str, str]:
    # Bytecode caching on, as for an installed package (pip compiles at install time).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "GPUWARDEN_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=REGION, AWS_REGION=REGION,
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
               AWS_EC2_METADATA_DISABLED="true",
               PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [
                   os.environ.get("PYTHONPATH")])]))
    return env


def seed(endpoint: str, instances: int, volumes: int) -> dict[str, int]:
    import boto3

    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    types = GPU_TYPES + CPU_TYPES
    batches = [(i, min(100, instances - i * 100)) for i in range((instances + 99) // 100)]

    def launch(batch: tuple[int, int]) -> None:
        index, count = batch
        tags = {"env": ("dev", "prod", "staging")[index % 3], "team": "ml"}
        if index % 4:
            tags.update({"project": "llm", "cost-center": "cc-42"})
        extra = {"InstanceMarketOptions": {"MarketType": "spot"}} if index % 3 == 1 else {}
        ec2.run_instances(
            ImageId=AMI, MinCount=count, MaxCount=count, InstanceType=types[index % len(types)],
            TagSpecifications=[{"ResourceType": "instance",
                                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
            **extra)

    def volume(index: int) -> None:
        ec2.create_volume(AvailabilityZone=f"{REGION}a", Size=100, Encrypted=index % 2 == 0,
                          TagSpecifications=[{"ResourceType": "volume", "Tags": [
                              {"Key": "team", "Value": "ml"}]}])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(launch, batches))
        list(pool.map(volume, range(volumes)))
    described = sum(len(r["Instances"]) for page in ec2.get_paginator(
        "describe_instances").paginate() for r in page["Reservations"])
    all_volumes = sum(len(page["Volumes"]) for page in ec2.get_paginator(
        "describe_volumes").paginate())
    return {"instances": described, "volumes": all_volumes}


# ---------------------------------------------------------------------------- measurements


def timed_run(python: str, target: str, arguments: list[str], env: dict[str, str]
              ) -> dict[str, Any]:
    """One run of an entry point in a fresh interpreter: wall time (start-up included), the
    time covered by API calls, and where the rest went."""
    with tempfile.TemporaryDirectory() as tmp:
        timings_path = Path(tmp) / "timings.json"
        started = time.perf_counter()
        result = subprocess.run([python, __file__, "--child", target, "--", *arguments],
                                cwd=REPO, env={**env, "BENCH_TIMINGS": str(timings_path)},
                                capture_output=True, text=True, timeout=1800, check=False)
        wall = time.perf_counter() - started
        if result.returncode != 0 or not timings_path.exists():
            raise RuntimeError(f"{target} failed ({result.returncode}):\n{result.stderr[-3000:]}")
        timings = json.loads(timings_path.read_text())
    intervals = sorted((start, end) for start, end, _ in timings["intervals"])
    union = gaps = 0.0
    cursor: float | None = None
    for start, end in intervals:
        if cursor is None or start > cursor:
            gaps += 0.0 if cursor is None else start - cursor
            union += end - start
            cursor = end
        elif end > cursor:
            union += end - cursor
            cursor = end
    first = intervals[0][0] if intervals else timings["ended"]
    last = cursor if cursor is not None else timings["ended"]
    interpreter = max(0.0, wall - (timings["ended"] - timings["started"]))
    operations: dict[str, int] = {}
    for _, _, operation in timings["intervals"]:
        operations[operation] = operations.get(operation, 0) + 1
    return {
        "wall_s": wall, "api_s": union, "api_calls": len(intervals), "operations": operations,
        "outside_s": wall - union, "outside_share": (wall - union) / wall,
        "before_first_call_s": interpreter + (first - timings["started"]),
        "between_calls_s": gaps, "after_last_call_s": timings["ended"] - last,
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(runs, key=lambda r: r["wall_s"])
    chosen = dict(ordered[len(ordered) // 2])
    chosen["walls"] = [r["wall_s"] for r in runs]
    chosen["outside_median_s"] = statistics.median(r["outside_s"] for r in runs)
    return chosen


def scan_arguments(report: Path) -> list[str]:
    # No --now: both tools evaluate at the current time (Custodian has no clock override).
    return ["scan", "--source", "aws", "--region", REGION, "--format", "json",
            "--output", str(report), "--soft-fail"]


def our_scan(env: dict[str, str], repeat: int) -> dict[str, Any]:
    report = OUT / "aws-scan-report.json"
    arguments = scan_arguments(report)
    timed_run(sys.executable, "engine.cli:main", arguments, env)  # warms the bytecode cache
    runs = [timed_run(sys.executable, "engine.cli:main", arguments, env) for _ in range(repeat)]
    summary = json.loads(report.read_text())["summary"]
    return {**median_run(runs), "resources": summary["resources"],
            "findings": summary["findings"]}


CUSTODIAN_POLICY = """\
policies:
  - name: gpu-spot-required
    resource: aws.ec2
    filters:
      - {{type: value, key: InstanceType, op: in, value: {gpu}}}
      - InstanceLifecycle: absent
      - not:
          - {{type: value, key: "tag:env", op: regex, value: "(?i)^(prod|production)$"}}
  - name: gpu-off-hours-shutdown
    resource: aws.ec2
    filters:
      - "State.Name": running
      - {{type: value, key: InstanceType, op: in, value: {gpu}}}
      - not:
          - {{type: value, key: "tag:env", op: regex, value: "(?i)^(prod|production)$"}}
      - {{type: offhour, default_tz: utc, offhour: 19, tag: gpuwarden-offhours, opt-out: true}}
  - name: required-cost-tags
    resource: aws.ec2
    filters:
      - {{type: value, key: InstanceType, op: in, value: {gpu}}}
      - or:
          - "tag:team": absent
          - "tag:project": absent
          - "tag:cost-center": absent
  - name: encryption-at-rest
    resource: aws.ebs
    filters:
      - Encrypted: false
"""


def custodian_binary() -> Path | None:
    venv = OUT / "c7n-venv"
    binary = venv / "bin" / "custodian"
    if binary.exists():
        return binary
    print("installing Cloud Custodian (c7n) into bench/out/c7n-venv ...", flush=True)
    created = subprocess.run([sys.executable, "-m", "venv", str(venv)], check=False)
    installed = created.returncode == 0 and subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", "c7n"],
        check=False).returncode == 0
    return binary if installed and binary.exists() else None


def custodian_scan(env: dict[str, str], repeat: int) -> dict[str, Any] | None:
    binary = custodian_binary()
    if binary is None:
        return None
    python = str(binary.parent / "python")
    policy = OUT / "custodian-policy.yml"
    policy.write_text(CUSTODIAN_POLICY.format(gpu=json.dumps(gpu_instance_types())))
    output = OUT / "custodian-out"
    cache = OUT / "custodian.cache"
    # Its resource cache shares one describe between the policies of a run; removed before
    # each run so that no run reuses another's.
    arguments = ["run", "--dryrun", "--cache", str(cache), "--region", REGION, "-s",
                 str(output), str(policy)]
    # c7n's interpreter, without our PYTHONPATH (it must not see the repository's packages).
    custodian_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}

    def fresh_run() -> dict[str, Any]:
        cache.unlink(missing_ok=True)
        return timed_run(python, "c7n.cli:main", arguments, custodian_env)

    try:
        fresh_run()
        runs = [fresh_run() for _ in range(repeat)]
    except RuntimeError as exc:
        print(f"custodian failed: {exc}")
        return None
    matched = {}
    for name in ("gpu-spot-required", "gpu-off-hours-shutdown", "required-cost-tags",
                 "encryption-at-rest"):
        resources = output / name / "resources.json"
        matched[name] = len(json.loads(resources.read_text())) if resources.exists() else 0
    return {**median_run(runs), "matched": matched}


def gpu_instance_types() -> list[str]:
    sys.path.insert(0, str(REPO))
    import csv

    path = REPO / "engine" / "data" / "catalog" / "gpu_instances.csv"
    with path.open(encoding="utf-8") as handle:
        return sorted({row["instance_type"] for row in csv.DictReader(handle)
                       if row["cloud"] == "aws"})


def import_times(repeat: int = 7) -> dict[str, dict[str, float]]:
    env = client_env("http://127.0.0.1:1")

    def wall(code: str) -> float:
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True)
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)

    def cumulative(module: str) -> float:
        result = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                                cwd=REPO, env=env, capture_output=True, text=True, check=True)
        for line in result.stderr.splitlines():
            parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
            if len(parts) == 3 and parts[2] == module:
                return int(parts[1]) / 1e6
        return float("nan")

    baseline = wall("pass")
    return {module: {"wall_s": wall(f"import {module}") - baseline,
                     "importtime_s": cumulative(module)}
            for module in ("engine.lambda_handler", "boto3")}


def run(command: list[str], env: dict[str, str], timeout: int = 1800
        ) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=timeout, check=False)
    return time.perf_counter() - started, result


def cold_handler_run(env: dict[str, str]) -> dict[str, Any]:
    code = ("import json, time\nstarted = time.perf_counter()\n"
            "import engine.lambda_handler as h\nimported = time.perf_counter()\n"
            f"summary = h.handler({{'regions': ['{REGION}']}}, None)\n"
            "print(json.dumps({'import_s': imported - started, "
            "'invoke_s': time.perf_counter() - imported, 'resources': summary.get('resources'),"
            " 'error': summary.get('error')}))")
    wall, result = run([sys.executable, "-c", code], env)
    if result.returncode != 0:
        return {"error": result.stderr[-500:]}
    figures: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    figures["wall_s"] = wall
    return figures


# ---------------------------------------------------------------------------- main


def describe(name: str, figures: dict[str, Any]) -> None:
    print(f"{name:38} {figures['wall_s']:8.2f} {figures['api_s']:8.2f} "
          f"{figures['outside_s']:8.2f} {figures['outside_share'] * 100:7.1f}%  "
          f"{figures['api_calls']:5d}   " + " ".join(f"{w:.1f}" for w in figures["walls"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=2000)
    parser.add_argument("--volumes", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-custodian", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_run(args.child, args.rest)
        return

    OUT.mkdir(parents=True, exist_ok=True)
    server, endpoint = start_moto()
    try:
        started = time.perf_counter()
        seeded = seed(endpoint, args.instances, args.volumes)
        print(f"moto {endpoint}: {seeded['instances']} instances, {seeded['volumes']} volumes "
              f"({args.volumes} created + the instances' root volumes) seeded in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        env = client_env(endpoint)
        ours = our_scan(env, args.repeat)
        custodian = None if args.no_custodian else custodian_scan(env, args.repeat)
        handler = cold_handler_run(env)
    finally:
        server.stop()
    imports = import_times()

    print(f"\n{'median of ' + str(args.repeat) + ' runs':38} {'wall s':>8} {'API s':>8} "
          f"{'other s':>8} {'other':>8}  {'calls':>5}   all walls")
    describe("gpuwarden scan --source aws", ours)
    if custodian is not None:
        describe("custodian run --dryrun (4 policies)", custodian)
    elif not args.no_custodian:
        print("custodian: could not be installed or run (see above)")
    print(f"\ngpuwarden: {ours['resources']} resources, {ours['findings']} findings; outside API "
          f"calls {ours['outside_share'] * 100:.1f}% of the wall time (target <= 10%):")
    print(f"  before the first call (interpreter, imports, policies, sessions) "
          f"{ours['before_first_call_s']:.2f} s; between calls {ours['between_calls_s']:.2f} s; "
          f"after the last call (normalize, evaluate, render) {ours['after_last_call_s']:.2f} s")
    print("  calls: " + ", ".join(f"{op} {n}" for op, n in sorted(ours["operations"].items())))
    if custodian is not None:
        print(f"custodian matched {custodian['matched']}; calls: " + ", ".join(
            f"{op} {n}" for op, n in sorted(custodian["operations"].items())))
    print("\nimport cost (fresh interpreter, median wall minus `python -c pass`; -X importtime "
          "cumulative):")
    for module, figures in imports.items():
        print(f"  import {module:22} {figures['wall_s'] * 1000:7.1f} ms   "
              f"{figures['importtime_s'] * 1000:7.1f} ms")
    if handler.get("error"):
        print(f"\nLambda handler cold invocation failed: {handler['error']}")
    else:
        print(f"\nLambda handler, cold (one fresh interpreter): import "
              f"{handler['import_s'] * 1000:.0f} ms, first dry-run invocation "
              f"{handler['invoke_s']:.2f} s ({handler['resources']} resources), process "
              f"{handler['wall_s']:.2f} s")
    (OUT / "aws_scan.json").write_text(json.dumps(
        {"seeded": seeded, "gpuwarden": ours, "custodian": custodian, "imports": imports,
         "lambda_cold": handler}, indent=2))


if __name__ == "__main__":
    main()
