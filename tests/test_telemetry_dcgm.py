"""A dcgm-exporter endpoint read directly (`--dcgm-url`), on the real exporter output."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.telemetry.dcgm import fetch_exporter, parse_exporter_text
from tests.conftest import REFERENCE

DCGM = REFERENCE / "dcgm"


def test_real_t4_output_gives_util_readings() -> None:
    result = parse_exporter_text((DCGM / "datadog-dcgm-metrics.txt").read_text())
    assert result.failure is None
    by_uuid = {r.uuid: r for r in result.readings}
    t4 = by_uuid["GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"]
    assert (t4.activity_pct, t4.activity_metric) == (0.0, "DCGM_FI_DEV_GPU_UTIL")
    assert (t4.memory_used_mib, t4.memory_total_mib) == (0.0, 15109.0)
    assert (t4.hostname, t4.model, t4.samples, t4.window_seconds) == \
        ("424773df46e0", "Tesla T4", 1, 0)
    # the capture's unlabelled dummy samples cannot name a GPU
    assert any("3 DCGM samples without GPU labels" in w for w in result.warnings)


def test_real_a100_mig_output_keeps_the_slice_and_drops_the_parent() -> None:
    result = parse_exporter_text((DCGM / "nvidia-docs-a100-mig-sample.txt").read_text())
    [mig] = result.readings
    assert (mig.mig_profile, mig.mig_instance) == ("1g.5gb", "13")
    assert mig.activity_pct == pytest.approx(99.5687)
    assert mig.hostname == "ub20-a100-k8s"


def test_unparsable_text_is_a_failure_with_its_reason() -> None:
    result = parse_exporter_text('DCGM_FI_DEV_GPU_UTIL{gpu="0" 5\n')
    assert result.failure is not None and "not Prometheus exposition text" in result.failure


@pytest.fixture
def exporter() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(500, "exporter crashed")
                return
            body = (DCGM / "datadog-dcgm-metrics.txt").read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetching_an_endpoint(exporter: str) -> None:
    result = fetch_exporter(f"{exporter}/metrics", timeout_s=5)
    assert {r.uuid for r in result.readings} >= {"GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"}
    broken = fetch_exporter(f"{exporter}/oops", timeout_s=5)
    assert broken.failure is not None and "HTTP 500" in broken.failure


def test_scan_with_dcgm_url_reads_memory_but_cannot_prove_idleness(
    exporter: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"apiVersion": "gpuwarden.io/v1", "kind": "Snapshot"}))
    monkeypatch.setattr(sys, "argv", ["gpuwarden", "scan", "--source", f"snapshot:{empty}",
                                      "--dcgm-url", f"{exporter}/metrics", "-f", "json",
                                      "--now", "2026-12-01T12:00:00Z"])
    with pytest.raises(SystemExit):
        main()
    report = json.loads(capsys.readouterr().out)
    idle = [f for f in report["findings"] if f["policy"] == "gpu-idle"]
    assert idle and all(f["result"] == "unknown" for f in idle)
    assert "covers 0s, less than the policy's 1h window" in idle[0]["message"]


def test_an_unreachable_exporter_is_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.prometheus_fixture import free_port

    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"apiVersion": "gpuwarden.io/v1", "kind": "Snapshot"}))
    monkeypatch.setattr(sys, "argv", ["gpuwarden", "scan", "--source", f"snapshot:{empty}",
                                      "--dcgm-url", f"http://127.0.0.1:{free_port()}/metrics"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 0
    assert "warning: telemetry: dcgm-exporter at" in capsys.readouterr().err
