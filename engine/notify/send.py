"""Send one digest per target, then remember what was sent."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from engine.core.model import Report
from engine.notify.digest import Digest, build_digest, failing, finding_key
from engine.notify.targets import Target

Warn = Callable[[str], None]


def _deliver(target: Target, digest: Digest) -> None:
    if target.kind == "slack":
        from engine.notify.slack import send_slack

        send_slack(target.address, digest)
    elif target.kind == "webhook":
        from engine.notify.webhook import send_webhook

        send_webhook(target.address, digest)
    else:
        from engine.notify.sns import send_sns

        send_sns(target.address, digest)


def notify(report: Report, targets: Sequence[Target], state_path: Path, warn: Warn,
           report_url: str | None = None, *, known: frozenset[str] | None = None) -> int:
    """Send the new failing findings' digest to each target; returns how many got it.

    The state keeps the keys of the findings that still fail and were notified, so a finding
    that is fixed and fails again is news again. When every target failed, the new findings
    stay unrecorded and the next run tries again. `known`: the keys already news (the last
    recorded run's failing findings, with a history); then no state file is read or written."""
    if not targets:
        return 0
    from engine.notify.state import read_state, write_state

    already = read_state(state_path) if known is None else set(known)
    digest = build_digest(report, already, report_url)
    delivered = 0
    if digest.new:
        for target in targets:
            try:
                _deliver(target, digest)
                delivered += 1
            except Exception as error:  # any failure is a warning, never a failed scan
                warn(f"notify {target.shown}: {type(error).__name__}: {error}")
    if known is not None:
        return delivered  # the history is the state
    current = {finding_key(f) for f in failing(report.findings)}
    sent = {finding_key(f) for f in digest.new} if delivered else set()
    try:
        write_state(state_path, (already & current) | sent)
    except OSError as error:
        warn(f"notify: cannot write the state file {state_path}: {error.strerror}")
    return delivered
