"""`gpuwarden policies test DIR`: Rego `test_` rules and YAML cases, for YAML and Rego policies."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytest.importorskip("regorus")

REPO = Path(__file__).resolve().parents[1]
REGO_PACK = REPO / "policies" / "rego"
AWS_PLAN = REPO / "tests" / "fixtures" / "plans" / "aws-gpu-plan.json"



def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), "utf-8")
    return path


def test_the_shipped_rego_examples_pass_their_tests(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli(["policies", "test", str(REGO_PACK), "-v"], capsys, monkeypatch)
    assert code == 0, out + err
    assert "PASS  data.gpuwarden.spot_test.test_on_demand_gpu_instance_is_denied" in out
    assert "PASS  data.k8srequiredlabels_test.test_missing_label_is_a_violation" in out
    assert "twins_test.yaml: the spot twin denies" in out
    assert out.strip().splitlines()[-1] == "23 passed, 0 failed, 0 errors (23 tests)"


def test_failing_and_erroring_rego_tests_exit_1(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "limits.rego", """\
        package limits

        import rego.v1

        too_many if input.gpus > 8
        """)
    write(tmp_path / "limits_test.rego", """\
        package limits_test

        import data.limits
        import rego.v1

        test_nine_is_too_many if limits.too_many with input as {"gpus": 9}
        test_eight_is_too_many if limits.too_many with input as {"gpus": 8}
        test_reports_value if 1 == 2
        test_divides if 1 / 0
        """)
    code, out, _ = run_cli(["policies", "test", str(tmp_path)], capsys, monkeypatch)
    assert code == 1
    lines = out.splitlines()
    assert "FAIL  data.limits_test.test_eight_is_too_many: undefined" in lines
    assert "FAIL  data.limits_test.test_reports_value: undefined" in lines
    [error] = [line for line in lines if line.startswith("ERROR")]
    assert f"{tmp_path / 'limits_test.rego'}:9:" in error and "divide by zero" in error
    assert lines[-1] == "1 passed, 2 failed, 1 errors (4 tests)"


BUILTIN_CASES = f"""\
    policies: [builtin]
    cases:
      - name: the built-in pack on the AWS fixture plan
        door: plan
        input: {AWS_PLAN}
        exact: false
        expect:
          - {{policy: gpu-spot-required, resource: aws_eks_node_group.ondemand_gpu,
              enforcement: deny, severity: high}}
          - {{policy: gpu-spot-required, resource: aws_instance.mystery, result: unknown}}
      - name: an inline admission manifest
        door: admission
        input:
          apiVersion: v1
          kind: Pod
          metadata: {{name: p, namespace: ml, labels: {{team: a, project: b, cost-center: c}}}}
          spec:
            containers:
              - name: c
                resources: {{limits: {{nvidia.com/gpu: 1}}}}
        namespace_labels: {{env: dev}}
        expect:
          - {{policy: gpu-spot-required, resource: Pod/ml/p}}
      - name: normalized resources at runtime
        door: runtime
        now: "2026-12-01T03:00:00Z"
        input:
          - {{provider: aws, kind: aws_instance, category: instance, id: i-1, name: box,
              state: running, instance_type: g5.xlarge, capacity: spot,
              tags: {{team: a, project: b, cost-center: c}}}}
        expect:
          - {{policy: gpu-off-hours-shutdown, resource: i-1, enforcement: deny}}
          - {{policy: gpu-idle, resource: i-1, result: unknown, message: telemetry}}
          - {{policy: gpu-underutilized, resource: i-1, result: unknown}}
    """


def test_yaml_cases_work_for_the_yaml_pack(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pack_test.yaml", BUILTIN_CASES)
    code, out, err = run_cli(["policies", "test", str(tmp_path), "-v"], capsys, monkeypatch)
    assert code == 0, out + err
    assert out.strip().splitlines()[-1] == "3 passed, 0 failed, 0 errors (3 tests)"


def test_a_wrong_expectation_fails_with_what_differs(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pack_test.yaml", f"""\
        policies: [builtin]
        cases:
          - name: wrong
            door: plan
            input: {AWS_PLAN}
            expect:
              - {{policy: gpu-spot-required, resource: aws_instance.nope}}
        """)
    code, out, _ = run_cli(["policies", "test", str(tmp_path)], capsys, monkeypatch)
    assert code == 1
    [line] = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert "missing gpu-spot-required fail on aws_instance.nope" in line
    assert "unexpected gpu-spot-required fail on aws_eks_node_group.ondemand_gpu" in line


def test_cases_beside_rego_policies_use_them_by_default(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("gpu_spot_required.rego", "gpu_spot_required.yaml"):
        shutil.copy(REGO_PACK / name, tmp_path / name)
    write(tmp_path / "spot_test.yaml", f"""\
        cases:
          - name: Rego twin on the AWS plan
            door: plan
            input: {AWS_PLAN}
            expect:
              - {{policy: gpu-spot-required, resource: aws_eks_node_group.ondemand_gpu}}
              - {{policy: gpu-spot-required, resource: aws_autoscaling_group.from_template}}
              - {{policy: gpu-spot-required, resource: aws_instance.mystery, result: unknown}}
        """)
    code, out, err = run_cli(["policies", "test", str(tmp_path)], capsys, monkeypatch)
    assert code == 0, out + err


def test_yaml_test_inputs_beside_the_policies_are_not_loaded_as_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("required_cost_tags.rego", "required_cost_tags.yaml"):
        shutil.copy(REGO_PACK / name, tmp_path / name)
    write(tmp_path / "inputs" / "gpu-pod.yaml", """\
        apiVersion: v1
        kind: Pod
        metadata: {name: trainer, namespace: ml, labels: {team: ml}}
        spec:
          containers:
            - name: c
              image: trainer
              resources: {limits: {nvidia.com/gpu: 1}}
        ---
        apiVersion: v1
        kind: Namespace
        metadata: {name: ml}
        """)
    write(tmp_path / "cost_tags_test.yaml", """\
        cases:
          - name: a GPU pod kept as a YAML manifest beside the policy
            door: admission
            input: inputs/gpu-pod.yaml
            expect:
              - {policy: required-cost-tags, resource: Pod/ml/trainer, message: project}
        """)
    code, out, err = run_cli(["policies", "test", str(tmp_path), "-v"], capsys, monkeypatch)
    assert code == 0, out + err
    assert "PASS" in out and "gpu-pod.yaml" not in err


def test_a_gatekeeper_template_in_a_policy_directory_is_still_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a test input: skipping it would drop a policy silently."""
    shutil.copy(REGO_PACK / "required_cost_tags.yaml", tmp_path / "p.yaml")
    shutil.copy(REGO_PACK / "required_cost_tags.rego", tmp_path / "required_cost_tags.rego")
    write(tmp_path / "template.yaml", """\
        apiVersion: templates.gatekeeper.sh/v1
        kind: ConstraintTemplate
        metadata: {name: k8srequiredlabels}
        """)
    write(tmp_path / "p_test.yaml", "cases: [{name: c, door: runtime, input: [], expect: []}]\n")
    code, _, err = run_cli(["policies", "test", str(tmp_path)], capsys, monkeypatch)
    assert code == 2 and "template.yaml" in err


def test_unreadable_input_is_an_error_result_not_a_crash(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "x_test.yaml", """\
        policies: [builtin]
        cases:
          - {name: missing file, door: plan, input: nothere.json}
          - {name: not a plan, door: plan, input: {hello: world}}
        """)
    code, out, _ = run_cli(["policies", "test", str(tmp_path)], capsys, monkeypatch)
    assert code == 1
    errors = [line for line in out.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2 and "nothere.json" in errors[0]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("cases:\n  - {name: a, door: plan, input: x.json, colour: red}\n", "colour"),
        ("cases:\n  - {name: a, door: sideways, input: x.json}\n", "door"),
        ("cases: []\n", "cases"),
        ("- just a list\n", "one mapping"),
    ],
)
def test_bad_case_files_exit_2_naming_the_file(tmp_path: Path, text: str, fragment: str,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    case = write(tmp_path / "bad_test.yaml", "policies: [builtin]\n" + text
                 if not text.startswith("-") else text)
    code, _, err = run_cli(["policies", "test", str(tmp_path)], capsys, monkeypatch)
    assert code == 2
    assert err.startswith(f"gpuwarden: error: {case}") and fragment in err


def test_a_directory_without_tests_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data.json").write_text(json.dumps({}))
    code, _, err = run_cli(["policies", "test", str(tmp_path)], capsys, monkeypatch)
    assert code == 2 and "no tests" in err
