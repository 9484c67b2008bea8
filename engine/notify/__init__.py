"""Notifications: a digest of the failing findings that are new since the last notification,
sent once to each `--notify` target (Slack, a generic JSON webhook, SNS). A failure to notify
is one warning; it never fails the scan."""

from engine.notify.send import notify
from engine.notify.targets import Target, parse_targets

__all__ = ["Target", "notify", "parse_targets"]
