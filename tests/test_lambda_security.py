"""The Lambda handler refuses dangerous events: a replayed clock in enforce mode, instants out of
range, a `detail` that is not an object, policy paths outside the package; it stops starting
actions at its deadline; and a fuzzer shows that no event makes it raise or enforce unasked.

Runs against moto in server mode, with the fixtures of tests/test_lambda_handler.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import lambda_handler
from engine.lambda_handler import KNOWN_FIELDS, handler, parse_run_config
from engine.loading.policies import builtin_pack_dir
from remediations.runner import DEADLINE_REACHED
from tests import test_lambda_handler as lambda_tests
from tests.conftest import OFF_HOURS
from tests.test_lambda_handler import BUCKET, Estate, FakeContext, logged

# The handler tests' fixtures: moto on loopback, a seeded account, its bucket, the calls made.
moto_endpoint = lambda_tests.moto_endpoint
estate = lambda_tests.estate
bucket = lambda_tests.bucket
api_calls = lambda_tests.api_calls

FUZZ_EXAMPLES = int(os.environ.get("GPUWARDEN_FUZZ_EXAMPLES", "150"))


@dataclass
class ContextWithTime(FakeContext):
    remaining_ms: int = 900_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def refused(event: object, message: str, api_calls: list[str]) -> None:
    result = handler(event, FakeContext())
    assert "error" in result and message in result["error"], result
    assert api_calls == []  # nothing was read, let alone changed


# ------------------------------------------------------------------------------ the clock


@pytest.mark.parametrize("event", [
    {"mode": "enforce", "now": OFF_HOURS.isoformat()},
    {"detail": {"mode": "enforce", "now": OFF_HOURS.isoformat()}},
    {"mode": "enforce", "detail": {"now": OFF_HOURS.isoformat()}},
])
def test_now_is_refused_in_enforce_mode(estate: Estate, api_calls: list[str],
                                        event: dict[str, Any]) -> None:
    refused(event, "'now' is refused in enforce mode", api_calls)
    assert set(estate.states().values()) == {"running"}


def test_now_is_refused_when_the_environment_enforces(
    estate: Estate, api_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUWARDEN_MODE", "enforce")
    refused({"now": OFF_HOURS.isoformat()}, "'now' is refused in enforce mode", api_calls)


@pytest.mark.parametrize("now", ["9999-12-31T23:59:59", "9999-12-31T23:59:59-05:00",
                                 "0001-01-01T00:00:00+05:00", "1969-12-31T23:59:59Z"])
def test_instants_out_of_range_are_an_error(estate: Estate, api_calls: list[str],
                                            now: str) -> None:
    refused({"now": now}, "is out of range", api_calls)


# ------------------------------------------------------------------------------ detail


@pytest.mark.parametrize("detail", ["enforce", ["mode", "enforce"], None, 5, True])
def test_a_detail_that_is_not_an_object_is_an_error(estate: Estate, api_calls: list[str],
                                                    detail: object) -> None:
    refused({"detail": detail}, "'detail' must be an object", api_calls)


# ------------------------------------------------------------------------------ policies


@pytest.mark.parametrize("path", [
    "../outside.yaml", "policies/../../outside.yaml", "/etc/passwd", "/tmp/policies.yaml",
    f"s3://{BUCKET}/policies.yaml", "s3://someone-elses-bucket/policies.yaml",
    "file:///etc/passwd", "https://example.com/p.yaml", "policies\\..\\..\\x.yaml",
    "gpu\x00.yaml", "x" * 5000,
])
def test_policy_paths_outside_the_package_are_refused(
    estate: Estate, bucket: str, api_calls: list[str], path: str
) -> None:
    refused({"policies": [path]}, "policies", api_calls)


def test_the_environment_cannot_point_outside_either(
    estate: Estate, api_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUWARDEN_POLICIES", "builtin,../../etc/policies.yaml")
    refused({}, "GPUWARDEN_POLICIES", api_calls)


def test_a_link_leading_out_of_the_package_is_refused(
    estate: Estate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    package, outside = tmp_path / "package", tmp_path / "outside.yaml"
    package.mkdir()
    outside.write_text("apiVersion: gpuwarden.io/v1\npolicies: []\n")
    (package / "policies.yaml").symlink_to(outside)
    monkeypatch.setenv("LAMBDA_TASK_ROOT", str(package))

    result = handler({"policies": ["policies.yaml"], "now": OFF_HOURS.isoformat()},
                     FakeContext())

    assert "leads outside the package" in result["error"] and "run_id" in result


def test_policies_inside_the_package_and_the_builtin_pack_are_read(
    estate: Estate, bucket: str
) -> None:
    builtin_file = str(sorted(builtin_pack_dir().glob("*.yaml"))[0])
    config = parse_run_config({"policies": ["builtin", builtin_file, "policies/gpu.yaml"]}, {})
    assert config.policies == ("builtin", builtin_file, "policies/gpu.yaml")

    summary = handler({"policies": [builtin_file], "now": OFF_HOURS.isoformat()},
                      FakeContext())
    assert "error" not in summary and summary["findings"] > 0


# ------------------------------------------------------------------------------ deadline


def test_no_action_starts_past_the_invocations_deadline(
    estate: Estate, bucket: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(lambda_handler, "utc_now", lambda: OFF_HOURS)

    summary = handler({"mode": "enforce"}, ContextWithTime(remaining_ms=0))

    assert set(estate.states().values()) == {"running"}
    assert summary["remediations"]["applied"] == 0 and summary["remediations"]["skipped"] >= 2
    report = json.loads(next(body for key, body in estate.objects().items()
                             if key.endswith(".json")))
    late = [f["remediation"] for f in report["findings"]
            if f["policy"] == "gpu-off-hours-shutdown"]
    assert len(late) == 2 and all(r["detail"] == DEADLINE_REACHED for r in late)
    audit = [line["record"] for line in logged(capsys) if line["phase"] == "audit"]
    assert [(r["phase"], r["reason"]) for r in audit] == [("check", DEADLINE_REACHED)] * 2


def test_a_real_lambda_context_leaves_time_to_act(
    estate: Estate, bucket: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lambda_handler, "utc_now", lambda: OFF_HOURS)

    summary = handler({"mode": "enforce"}, ContextWithTime(remaining_ms=300_000))

    assert summary["remediations"]["applied"] == 2
    assert estate.states()["dev-gpu"] == "stopped"


# ------------------------------------------------------------------------------ fuzzer

JSON_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                | st.text(max_size=40)
                | st.sampled_from(["enforce", "dry-run", "builtin", "all", "us-east-1",
                                   "9999-12-31T23:59:59", "2026-12-01T03:00:00Z", "../x",
                                   "s3://b/p.yaml", "/etc/passwd",
                                   "arn:aws:iam::123456789012:role/x"]))
JSON = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)
KEYS = st.sampled_from(sorted(KNOWN_FIELDS)) | st.text(max_size=12)
EVENTS = (st.dictionaries(KEYS, JSON, max_size=6)
          | st.dictionaries(KEYS, JSON, max_size=3).map(lambda detail: {"detail": detail})
          | JSON)


def _asked_to_enforce(event: object) -> bool:
    if not isinstance(event, dict):
        return False
    detail = event.get("detail")
    return event.get("mode") == "enforce" or (
        "mode" not in event and isinstance(detail, dict) and detail.get("mode") == "enforce")


@settings(max_examples=FUZZ_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(event=EVENTS)
def test_fuzzed_events_never_raise_nor_enforce_unasked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], event: object
) -> None:
    for name in list(os.environ):
        if name.startswith("GPUWARDEN_") or name == "LAMBDA_TASK_ROOT":
            monkeypatch.delenv(name)
    runs: list[Any] = []

    def run(config: Any, log: Any, started: Any = None, deadline: Any = None
            ) -> dict[str, Any]:
        runs.append(config)
        return {"run_id": "fuzz", "mode": config.mode}

    monkeypatch.setattr(lambda_handler, "run", run)

    result = handler(event, FakeContext())
    capsys.readouterr()

    assert isinstance(result, dict)
    if "error" in result:
        assert not runs and isinstance(result["error"], str) and len(result["error"]) < 400
        return
    [config] = runs
    assert config.mode == ("enforce" if _asked_to_enforce(event) else "dry-run")
    assert config.mode == "dry-run" or config.now is None
    for policy in config.policies:
        assert policy == "builtin" or (".." not in policy and "://" not in policy)
