"""Notifications: a digest of new failing findings, once, to Slack / a JSON webhook / SNS."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine.core.errors import InputError
from engine.demo import demo_policy_paths, demo_snapshot_path
from engine.notify.digest import build_digest
from engine.notify.slack import escape, slack_message
from engine.notify.targets import parse_target
from tests.conftest import run_cli
from tests.conftest_aws import moto_endpoint_fixture  # noqa: F401 - the moto_endpoint fixture

NOW = "2026-03-04T22:30:00Z"


class Receiver:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                return None

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook/secret"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def scan(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
         snapshot: Path | None = None) -> tuple[int, str, str]:
    source = snapshot or demo_snapshot_path()
    policies = [arg for path in demo_policy_paths() for arg in ("--policies", str(path))]
    return run_cli(["scan", "--source", f"snapshot:{source}", *policies, "--now", NOW,
                    "--format", "json", "--quiet", *args], capsys, monkeypatch)


def failing_count(out: str) -> int:
    return sum(1 for f in json.loads(out)["findings"] if f["result"] == "fail")


def test_slack_gets_one_digest_then_nothing_for_the_same_findings(
        receiver: Receiver, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state.json"
    args = ["--notify", f"slack:{receiver.url}", "--notify-state", str(state)]
    code, out, err = scan(args, capsys, monkeypatch)
    failing = failing_count(out)
    assert failing > 0 and err == ""
    assert len(receiver.bodies) == 1
    message = receiver.bodies[0]
    assert message["text"].startswith(f"gpuwarden: {failing} new failing finding")
    assert message["blocks"][0]["type"] == "header"
    assert "*Spend* $" in message["blocks"][1]["text"]["text"]
    assert "•" in message["blocks"][2]["text"]["text"]

    again, _, err = scan(args, capsys, monkeypatch)
    assert again == code and err == ""
    assert len(receiver.bodies) == 1  # nothing new: no second message


def test_generic_webhook_gets_the_json_digest(
        receiver: Receiver, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["--notify", receiver.url, "--notify-state", str(tmp_path / "state.json")]
    _, out, _ = scan(args, capsys, monkeypatch)
    [digest] = receiver.bodies
    report = json.loads(out)
    assert digest["source"] == "gpuwarden"
    assert digest["new_findings"] == failing_count(out)
    assert digest["summary"]["savings_usd"] == round(report["summary"]["savings_usd"], 2)
    dollars = [f["estimated_monthly_usd"] for f in digest["findings"]]
    assert dollars == sorted(dollars, reverse=True) and len(dollars) <= 10


def test_unreachable_target_warns_and_keeps_the_exit_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    baseline, _, _ = scan([], capsys, monkeypatch)
    state = tmp_path / "state.json"
    code, _, err = scan(["--notify", f"http://127.0.0.1:{port}/x", "--notify-state", str(state)],
                        capsys, monkeypatch)
    assert code == baseline
    [line] = err.splitlines()
    assert line.startswith("gpuwarden: warning: notify webhook http://127.0.0.1:")
    assert "/x" not in line  # the path (a webhook's secret) is not echoed
    assert json.loads(state.read_text())["notified"] == []  # undelivered: retried next run


def test_bad_target_is_exit_2(capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = scan(["--notify", "ftp://example.com/x"], capsys, monkeypatch)
    assert code == 2 and "--notify" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("value", ["sns:arn:aws:sns:us-east-1:12:t", "http://", "file:///etc",
                                   "http://host/a b", "x" * 5000])
def test_target_parsing_rejects(value: str) -> None:
    with pytest.raises(InputError):
        parse_target(value)


def test_target_kinds() -> None:
    assert parse_target("https://hooks.slack.com/services/T/B/x").kind == "slack"
    assert parse_target("https://example.com/hook").kind == "webhook"
    sns = parse_target("sns:arn:aws:sns:eu-west-1:123456789012:alerts")
    assert (sns.kind, sns.address) == ("sns", "arn:aws:sns:eu-west-1:123456789012:alerts")


def test_hostile_text_is_escaped_and_bounded() -> None:
    from engine.core.model import Finding, Report, ResourceRef, Severity

    hostile = "<!channel> <https://evil|click> & " + "A" * 10_000
    finding = Finding(policy="p", severity=Severity.HIGH, result="fail", enforcement="deny",
                      message=hostile, resource=ResourceRef(provider="aws", kind="ec2",
                                                            id="i-1", name=hostile))
    report = Report(generated_at="2026-03-04T22:30:00Z", findings=[finding] * 30)  # type: ignore[arg-type]
    text = json.dumps(slack_message(build_digest(report, set(), None)))
    assert "<!channel>" not in text and "<https://evil" not in text
    assert "&lt;!channel&gt;" in text and "&amp;" in text
    assert len(text) < 12_000
    assert escape("a<b>&c") == "a&lt;b&gt;&amp;c"


def test_sns_topic_receives_the_digest(
        moto_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    sns = boto3.client("sns", region_name="us-east-1")
    sqs = boto3.client("sqs", region_name="us-east-1")
    topic = sns.create_topic(Name="gpuwarden-alerts")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="gpuwarden-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn,
                  Attributes={"RawMessageDelivery": "true"})

    args = ["--notify", f"sns:{topic}", "--notify-state", str(tmp_path / "state.json")]
    _, out, err = scan(args, capsys, monkeypatch)
    assert err == ""
    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
    [message] = messages
    digest = json.loads(message["Body"])
    assert digest["new_findings"] == failing_count(out) > 0


def test_lambda_config_reads_notify_from_the_environment_and_the_event() -> None:
    from engine.lambda_config import parse_run_config

    arn = "sns:arn:aws:sns:us-east-1:123456789012:alerts"
    environ = {"GPUWARDEN_NOTIFY": f"https://hooks.slack.com/services/T/B/x, {arn}"}
    assert parse_run_config({}, environ).notify == ("https://hooks.slack.com/services/T/B/x", arn)
    assert parse_run_config({"notify": [arn]}, environ).notify == (arn,)


@pytest.mark.parametrize(("event", "environ"), [
    ({"notify": ["ftp://example.com/"]}, {}),
    ({"notify": "https://example.com/"}, {}),
    ({"notify": []}, {}),
    ({}, {"GPUWARDEN_NOTIFY": "http://[bad"}),
    ({}, {"GPUWARDEN_NOTIFY": "sns:arn:aws:sns:us-east-1:1:t"}),
])
def test_lambda_config_rejects_a_bad_notify_target(event: dict[str, Any],
                                                   environ: dict[str, str]) -> None:
    from engine.lambda_config import parse_run_config

    with pytest.raises(InputError) as raised:
        parse_run_config(event, environ)
    assert "notify" in str(raised.value).lower() and "\n" not in str(raised.value)
