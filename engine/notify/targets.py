"""`--notify URL`: where a digest goes. `https://hooks.slack.com/...` is Slack; `slack:URL` is
a Slack-compatible receiver elsewhere (Mattermost, a proxy); any other http(s) URL gets the JSON
digest; `sns:ARN` is an SNS topic."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from engine.core.errors import InputError, printable

URL_LIMIT = 2048
TARGET_LIMIT = 20
SLACK_HOST = "hooks.slack.com"
_SNS_ARN = re.compile(r"arn:aws[a-z-]*:sns:[a-z0-9-]{1,30}:\d{12}:[A-Za-z0-9_.-]{1,256}")

Kind = Literal["slack", "webhook", "sns"]


@dataclass(frozen=True, slots=True)
class Target:
    kind: Kind
    address: str  # the URL, or the topic ARN

    @property
    def shown(self) -> str:
        """How a warning names the target without echoing a webhook's secret path."""
        if self.kind == "sns":
            return f"sns:{self.address}"
        parts = urlsplit(self.address)
        return f"{self.kind} {parts.scheme}://{parts.netloc}"


def parse_targets(values: Iterable[str]) -> tuple[Target, ...]:
    targets = tuple(parse_target(value) for value in values)
    if len(targets) > TARGET_LIMIT:
        raise InputError(f"--notify: at most {TARGET_LIMIT} targets")
    return targets


def parse_target(value: str) -> Target:
    if len(value) > URL_LIMIT:
        raise InputError(f"--notify: longer than {URL_LIMIT} characters")
    if value.startswith("sns:"):
        arn = value[len("sns:"):]
        if not _SNS_ARN.fullmatch(arn):
            raise InputError(f"--notify: not an SNS topic ARN: {printable(arn, 200)!r}")
        return Target("sns", arn)
    forced_slack = value.startswith("slack:")  # a Slack-compatible receiver on another host
    value = value[len("slack:"):] if forced_slack else value
    try:
        parts = urlsplit(value)
        scheme, host = parts.scheme, parts.hostname
    except ValueError:
        scheme, host = "", None
    if scheme not in ("http", "https") or not host or any(
            ord(char) < 33 for char in value):
        raise InputError(f"--notify: not an http(s) URL or sns:ARN: {printable(value, 200)!r}")
    is_slack = forced_slack or (scheme == "https" and host == SLACK_HOST)
    kind: Kind = "slack" if is_slack else "webhook"
    return Target(kind, value)
