"""A generic JSON webhook: the digest as one JSON document."""

from __future__ import annotations

from engine.notify.digest import Digest
from engine.notify.http import post_json


def send_webhook(url: str, digest: Digest) -> None:
    post_json(url, {"source": "gpuwarden", **digest.to_json_dict()})
