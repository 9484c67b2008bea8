"""`gpuwarden policies test` runs a Gatekeeper library suite's cases on imported templates: the
case's `inventory:` objects become data.inventory for the policies that declare their kinds,
and objects other than workloads (Ingresses, Services, Namespaces) are judged as the webhook
judges them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("regorus")
REPO = Path(__file__).resolve().parents[1]
LIBRARY = REPO / "tests" / "data" / "gatekeeper"
SUITES = {  # library template → the policy id of its sample constraint
    "uniqueingresshost": "unique-ingress-host",
    "uniqueserviceselector": "unique-service-selector",
    "requiredlabels": "all-must-have-owner",
}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from engine.cli import main; sys.argv[0] = 'gpuwarden'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def _kind(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["kind"])


def _cases(name: str, policy: str, *, with_inventory: bool = True) -> list[dict[str, Any]]:
    """The library suite's cases (of the test whose constraint is `policy`'s) as gpuwarden
    YAML cases."""
    suite = yaml.safe_load((LIBRARY / name / "suite.yaml").read_text())
    cases = []
    for test in suite["tests"]:
        constraint = yaml.safe_load((LIBRARY / name / test["constraint"]).read_text())
        if constraint["metadata"]["name"] != policy:
            continue
        for case in test["cases"]:
            obj = LIBRARY / name / case["object"]
            fails = case["assertions"][0]["violations"] not in ("no", False, 0)
            metadata = yaml.safe_load(obj.read_text())["metadata"]
            namespace = metadata.get("namespace")
            resource = "/".join(p for p in (_kind(obj), namespace, metadata["name"]) if p)
            cases.append({
                "name": case["name"], "door": "admission", "input": str(obj),
                "inventory": [str(LIBRARY / name / p) for p in case.get("inventory", [])]
                if with_inventory else [],
                "expect": [{"policy": policy, "resource": resource}] if fails else []})
    return cases


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imported")
    for name, policy in SUITES.items():
        sample = next(p for p in (LIBRARY / name / "samples").rglob("constraint.yaml")
                      if yaml.safe_load(p.read_text())["metadata"]["name"] == policy)
        done = _cli("policies", "import-gatekeeper", str(LIBRARY / name / "template.yaml"),
                    str(sample), "-o", str(out / name))
        assert done.returncode == 0, done.stderr
    return out


def test_the_library_suites_pass_under_policies_test(imported: Path) -> None:
    total = 0
    for name, policy in SUITES.items():
        cases = _cases(name, policy)
        total += len(cases)
        (imported / name / "suite_test.yaml").write_text(yaml.safe_dump({"cases": cases}))
    done = _cli("policies", "test", str(imported))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{total} passed, 0 failed, 0 errors" in done.stdout
    assert total >= 8  # the suites have not shrunk to nothing


def test_without_the_inventory_objects_the_conflicts_are_missed(imported: Path,
                                                                 tmp_path: Path) -> None:
    target = tmp_path / "ingress"
    target.mkdir()
    for path in (imported / "uniqueingresshost").glob("k8s*"):
        (target / path.name).write_text(path.read_text())
    cases = _cases("uniqueingresshost", "unique-ingress-host", with_inventory=False)
    (target / "suite_test.yaml").write_text(yaml.safe_dump({"cases": cases}))
    done = _cli("policies", "test", str(target))
    assert done.returncode == 1
    assert "1 passed, 2 failed" in done.stdout  # the allowed case still passes


def test_an_inventory_entry_that_is_not_an_object_is_a_case_error(imported: Path,
                                                                   tmp_path: Path) -> None:
    target = tmp_path / "bad"
    target.mkdir()
    for path in (imported / "uniqueserviceselector").glob("k8s*"):
        (target / path.name).write_text(path.read_text())
    case = _cases("uniqueserviceselector", "unique-service-selector")[0]
    case["inventory"] = [{"metadata": {"name": "no-kind"}}]
    (target / "suite_test.yaml").write_text(yaml.safe_dump({"cases": [case]}))
    done = _cli("policies", "test", str(target))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "an inventory object is a Kubernetes object with apiVersion and kind" in done.stdout
