"""Rego evaluated by an OPA server through opa-python-client. No OPA server can be installed
here: the server is tests/opa_stub.py, OPA's REST Policy and Data API served over loopback,
evaluating with OPA's own engine (the opa-golib-python-bindings test oracle), so the remote
answers checked here are OPA's."""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.cli import main
from engine.core.errors import InputError
from engine.core.evaluate import Engine
from engine.core.model import State
from engine.loading.policies import load_policies
from engine.rego.common import RegoError, RegoUnavailable
from engine.rego.inputs import plan_documents
from engine.rego.remote import parse_opa_url
from engine.sources.kubernetes import workload_resource
from engine.sources.terraform import plan_resources, read_plan

pytest.importorskip("regorus")

from tests.opa_stub import OPA_ORACLE_MISSING, OpaStub, opa_bindings, serve

REPO = Path(__file__).resolve().parents[1]
REGO_PACK = REPO / "policies" / "rego"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def opa() -> Iterator[tuple[str, OpaStub]]:
    """OPA's REST API over loopback, evaluating with OPA's own engine (never regorus here)."""
    if opa_bindings() is None:
        pytest.skip(OPA_ORACLE_MISSING)
    with serve() as running:
        assert running[1].evaluator == "opa"
        yield running


def remote_copy(tmp_path: Path, wrapper: Path, url: str, **rego: Any) -> Path:
    """The wrapper policy file, pointed at `url` (module and data paths made absolute)."""
    document = yaml.safe_load(wrapper.read_text("utf-8"))
    for policy in document["policies"]:
        spec = policy["rego"]
        spec["module"] = str(wrapper.parent / spec["module"])
        spec["data"] = [d if d.startswith("builtin:") else str(wrapper.parent / d)
                        for d in spec.get("data", [])]
        spec.update({"evaluator": "remote", "opa_url": url, **rego})
    path = tmp_path / f"remote-{wrapper.name}"
    path.write_text(yaml.safe_dump(document, sort_keys=False), "utf-8")
    return path


def gpu_pod(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "trainer", "namespace": "ml", "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "cuda",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def findings_at(engine: Engine, obj: dict[str, Any], door: str) -> list[tuple[str, str, str]]:
    state = State.PLANNED if door == "admission" else State.RUNNING
    resource = workload_resource(copy.deepcopy(obj), {}, state=state)
    assert resource is not None
    report = engine.evaluate([resource], NOW, door=door)  # type: ignore[arg-type]
    return [(f.resource.id, f.result, f.message) for f in report.findings]


# ---------------------------------------------------------------------------- the API contract


def test_modules_are_uploaded_exactly_as_written_with_their_data(
    tmp_path: Path, opa: tuple[str, OpaStub]
) -> None:
    url, stub = opa
    wrapper = remote_copy(tmp_path, REGO_PACK / "gpu_spot_required.yaml", url,
                          data=["builtin:catalog"])
    engine = Engine(load_policies([str(wrapper)]))
    plan_path = REPO / "tests" / "fixtures" / "plans" / "aws-gpu-plan.json"
    plan = read_plan(str(plan_path))
    engine.evaluate(plan_resources(plan, "p", engine.catalog), NOW, door="plan",
                    documents=plan_documents([plan]))
    module = (REGO_PACK / "gpu_spot_required.rego").read_text("utf-8")
    assert stub.policies == {"gpuwarden/gpu-spot-required/gpu_spot_required.rego": module}
    assert set(stub.data["gpuwarden"]["catalog"]) == {"instance_types", "accelerators",
                                                      "spot_discounts"}


def test_remote_and_embedded_give_the_same_plan_findings(
    tmp_path: Path, opa: tuple[str, OpaStub]
) -> None:
    url, _ = opa
    embedded = Engine(load_policies([str(REGO_PACK / "gpu_spot_required.yaml")]))
    remote = Engine(load_policies([str(remote_copy(tmp_path, REGO_PACK /
                                                   "gpu_spot_required.yaml", url))]))
    for name in ("aws", "azure", "gcp"):
        plan_path = REPO / "tests" / "fixtures" / "plans" / f"{name}-gpu-plan.json"
        plan = read_plan(str(plan_path))
        resources = plan_resources(plan, str(plan_path), embedded.catalog)
        expected = embedded.evaluate(resources, NOW, door="plan",
                                     documents=plan_documents([plan])).to_json_dict()
        actual = remote.evaluate(resources, NOW, door="plan",
                                 documents=plan_documents([plan])).to_json_dict()
        assert actual["findings"] == expected["findings"] and actual["findings"]


def test_admission_uses_the_async_client_and_agrees_with_embedded(
    tmp_path: Path, opa: tuple[str, OpaStub]
) -> None:
    url, stub = opa
    embedded = Engine(load_policies([str(REGO_PACK / "required_cost_tags.yaml")]))
    remote = Engine(load_policies([str(remote_copy(tmp_path, REGO_PACK /
                                                   "required_cost_tags.yaml", url))]))
    for labels in ({}, {"team": "a", "project": "b", "cost-center": "c"}, {"team": "a"}):
        for door in ("admission", "runtime"):
            assert findings_at(remote, gpu_pod(labels), door) == findings_at(
                embedded, gpu_pod(labels), door)
    assert stub.requests >= 7
    # admission evaluations ran on the shared event loop thread (aiohttp), not requests
    program = remote.policies[0].rego
    assert program is not None and getattr(program.evaluator, "_async_clients", None)


def test_concurrent_admission_requests_share_one_loop(
    tmp_path: Path, opa: tuple[str, OpaStub]
) -> None:
    url, _ = opa
    remote = Engine(load_policies([str(remote_copy(tmp_path, REGO_PACK /
                                                   "required_cost_tags.yaml", url))]))
    results: list[Any] = []

    def admit() -> None:
        results.append(findings_at(remote, gpu_pod(), "admission"))

    threads = [threading.Thread(target=admit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and all(r == results[0] and r for r in results)


def test_undefined_result_is_no_finding(tmp_path: Path, opa: tuple[str, OpaStub]) -> None:
    url, stub = opa
    (tmp_path / "quiet.rego").write_text("package quiet\n\nimport rego.v1\n\n"
                                         "deny contains \"never\" if input.never_set\n", "utf-8")
    path = tmp_path / "quiet.yaml"
    path.write_text(yaml.safe_dump({"policies": [{
        "id": "quiet", "title": "t", "severity": "low", "resources": ["workload"],
        "rego": {"module": "quiet.rego", "evaluator": "remote", "opa_url": url}}]}), "utf-8")
    engine = Engine(load_policies([str(path)]))
    assert findings_at(engine, gpu_pod(), "runtime") == []
    assert stub.query(["quiet", "deny"], {}) == (200, {"result": []})
    assert stub.query(["quiet", "missing"], {}) == (200, {})


# ---------------------------------------------------------------------------- failures


def write_remote(tmp_path: Path, url: str, module: str, **rego: Any) -> Path:
    (tmp_path / "m.rego").write_text(module, "utf-8")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"policies": [{
        "id": "remote-one", "title": "t", "severity": "high", "resources": ["workload"],
        "enforcement": {"admission": "deny", "runtime": "audit"},
        "rego": {"module": "m.rego", "evaluator": "remote", "opa_url": url,
                 "input": "admission", **rego}}]}), "utf-8")
    return path


DENY_ALL = "package m\n\nimport rego.v1\n\ndeny contains \"no\" if input.request.object\n"


def test_opa_compile_error_names_the_module_and_line(tmp_path: Path,
                                                     opa: tuple[str, OpaStub]) -> None:
    url, _ = opa
    path = write_remote(tmp_path, url, "package m\n\nimport rego.v1\n\ndeny contains x if {\n"
                        "  x := [1,\n}\n")
    engine = Engine(load_policies([str(path)]))
    with pytest.raises(RegoError) as caught:
        findings_at(engine, gpu_pod(), "runtime")
    assert caught.value.file == str(tmp_path / "m.rego") and caught.value.line in (6, 7)
    assert "OPA rejected the module" in caught.value.message


def test_opa_evaluation_error_is_an_input_error(tmp_path: Path, opa: tuple[str, OpaStub]) -> None:
    url, _ = opa
    path = write_remote(tmp_path, url, "package m\n\nimport rego.v1\n\nlimit := 1\n\n"
                        "limit := 2 if input.request\n\ndeny contains \"x\" if limit\n")
    engine = Engine(load_policies([str(path)]))
    with pytest.raises(RegoError, match="OPA: "):
        findings_at(engine, gpu_pod(), "runtime")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_opa_is_a_clear_error_at_the_cli_doors(tmp_path: Path) -> None:
    path = write_remote(tmp_path, f"http://127.0.0.1:{closed_port()}", DENY_ALL)
    engine = Engine(load_policies([str(path)]))
    with pytest.raises(RegoUnavailable, match=r"OPA at http://127\.0\.0\.1:\d+ did not answer"):
        findings_at(engine, gpu_pod(), "runtime")


@pytest.mark.parametrize(("failure_policy", "result"), [("Ignore", "unknown"), ("Fail", "fail")])
def test_unreachable_opa_at_admission_follows_the_failure_policy(
    tmp_path: Path, failure_policy: str, result: str
) -> None:
    path = write_remote(tmp_path, f"http://127.0.0.1:{closed_port()}", DENY_ALL,
                        failure_policy=failure_policy)
    engine = Engine(load_policies([str(path)]))
    [(_, found, message)] = findings_at(engine, gpu_pod(), "admission")
    assert found == result and f"failure_policy {failure_policy}" in message


class _Slow(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_POST(self) -> None:
        time.sleep(2.0)
        try:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
        except OSError:  # the client gave up first, as it should
            pass


def test_a_slow_opa_is_cut_off_by_the_admission_timeout(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        path = write_remote(tmp_path, url, DENY_ALL, admission_timeout_s=0.3)
        engine = Engine(load_policies([str(path)]))
        started = time.perf_counter()
        [(_, found, message)] = findings_at(engine, gpu_pod(), "admission")
        assert time.perf_counter() - started < 1.8
        assert found == "unknown" and "did not answer" in message
    finally:
        server.shutdown()
        server.server_close()


def test_check_plan_exits_2_when_opa_is_down(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    wrapper = remote_copy(tmp_path, REGO_PACK / "gpu_spot_required.yaml",
                          f"http://127.0.0.1:{closed_port()}")
    plan = REPO / "tests" / "fixtures" / "plans" / "aws-gpu-plan.json"
    monkeypatch.setattr("sys.argv", ["gpuwarden", "check-plan", str(plan),
                                     "--policies", str(wrapper)])
    with pytest.raises(SystemExit) as caught:
        main()
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"gpuwarden: error: {wrapper}: OPA at http://127.0.0.1:")
    assert "\n" not in err and "Traceback" not in err


def test_a_v0_module_is_sent_as_written_and_opa_1_refuses_it(
    tmp_path: Path, opa: tuple[str, OpaStub]
) -> None:
    url, stub = opa
    wrapper = remote_copy(tmp_path, REGO_PACK / "gatekeeper" / "required_labels.yaml", url)
    engine = Engine(load_policies([str(wrapper)]))
    with pytest.raises(RegoError, match="OPA rejected the module") as caught:
        findings_at(engine, gpu_pod(), "runtime")
    assert caught.value.file == str(REGO_PACK / "gatekeeper" / "k8srequiredlabels.rego")
    assert stub.policies == {}  # nothing rewritten behind the user's back


@pytest.mark.parametrize("url", ["opa:8181", "ftp://opa", "http://opa:8181/v1/data",
                                 "http://opa:notaport"])
def test_opa_urls_must_be_a_server_root(url: str) -> None:
    with pytest.raises(InputError, match="opa_url"):
        parse_opa_url(url)


def test_token_env_must_be_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUWARDEN_TEST_OPA_TOKEN", raising=False)
    path = write_remote(tmp_path, "http://127.0.0.1:8181", DENY_ALL,
                        token_env="GPUWARDEN_TEST_OPA_TOKEN")
    with pytest.raises(InputError, match="token_env GPUWARDEN_TEST_OPA_TOKEN is not set"):
        load_policies([str(path)])


def test_stub_answers_like_opa_for_bad_requests(opa: tuple[str, OpaStub]) -> None:
    _, stub = opa
    status, body = stub.put_policy("x.rego", "package x\n\ndeny contains if {\n")
    assert status == 400 and body["errors"][0]["location"]["file"] == "x.rego"
    assert stub.put_data(["a", "b"], {"c": 1}) == (204, None)
    assert stub.query(["a", "b", "c"], None) == (200, {"result": 1})
