"""A history store under an S3 prefix: one JSON object per run, partitioned by date so Athena
can query it — `s3://bucket/prefix/date=YYYY-MM-DD/run-<id>.json`. boto3 is imported only
when an S3 history is used."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

from engine.core.errors import InputError, printable
from engine.history.store import MAX_DOCUMENT_BYTES, MAX_RUNS, Run

PARTITION = re.compile(r"date=(\d{4}-\d{2}-\d{2})/run-[^/]+\.json$")
KEY_TIME = re.compile(r"/run-(\d{8}T\d{6}Z)-[^/]*\.json$")


def _key_time(key: str) -> datetime | None:
    """The run's instant from its key (`run-<yyyymmddThhmmssZ>-<id>.json`, as `append` names
    it); None for another name."""
    found = KEY_TIME.search(key)
    if found is None:
        return None
    return datetime.strptime(found.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


class S3Store:
    def __init__(self, url: str) -> None:
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not bucket:
            raise InputError(f"--history: no bucket in {printable(url)!r}")
        self.url, self.bucket = url, bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"

    def _client(self) -> Any:
        try:
            import boto3
        except ImportError:
            raise InputError("an S3 history needs boto3 (python3 -m pip install boto3)") from None
        return boto3.client("s3")

    def append(self, run: Run) -> int:
        ident = f"{run.at.astimezone(UTC).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
        key = f"{self.prefix}date={run.at.date().isoformat()}/run-{ident}.json"
        body = json.dumps({"at": run.at.isoformat(), "command": run.command,
                           "source": run.source, "report": run.report,
                           "snapshot": run.snapshot}).encode()
        self._call(lambda s3: s3.put_object(Bucket=self.bucket, Key=key, Body=body,
                                            ContentType="application/json"))
        return 0

    def runs(self, since: datetime | None = None) -> list[Run]:
        keys = self._call(lambda s3: self._keys(s3, since))
        documents = [self._call(lambda s3, key=key: self._document(s3, key)) for key in keys]
        runs = sorted((self._run(key, doc) for key, doc in documents),
                      key=lambda run: run.at)
        return [Run(id=n, at=r.at, command=r.command, source=r.source, report=r.report,
                    snapshot=r.snapshot) for n, r in enumerate(runs, 1)
                if since is None or r.at >= since]

    def latest_before(self, before: datetime, since: datetime) -> Run | None:
        """The last run recorded before `before` (and at or after `since`): the keys are
        listed, only that one object is read."""
        stamped = [(at, key) for key in self._call(lambda s3: self._keys(s3, since))
                   if (at := _key_time(key)) is not None and since <= at < before]
        if not stamped:
            return None
        _, key = max(stamped)
        return self._run(*self._call(lambda s3: self._document(s3, key)))

    def _keys(self, s3: Any, since: datetime | None) -> list[str]:
        keys: list[str] = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                 Prefix=self.prefix):
            for item in page.get("Contents") or []:
                match = PARTITION.search(str(item.get("Key")))
                if match and (since is None or match.group(1) >= since.date().isoformat()):
                    keys.append(str(item["Key"]))
            if len(keys) >= MAX_RUNS:
                return keys[:MAX_RUNS]
        return keys

    def _document(self, s3: Any, key: str) -> tuple[str, dict[str, Any]]:
        answer = s3.get_object(Bucket=self.bucket, Key=key)
        if int(answer.get("ContentLength") or 0) > MAX_DOCUMENT_BYTES:
            raise InputError(f"history: s3://{self.bucket}/{key} is too large")
        try:
            value = json.loads(answer["Body"].read(MAX_DOCUMENT_BYTES + 1))
        except (ValueError, RecursionError):
            value = None
        if not isinstance(value, dict):
            raise InputError(f"history: s3://{self.bucket}/{key} is damaged")
        return key, value

    def _run(self, key: str, doc: dict[str, Any]) -> Run:
        try:
            report, snapshot = doc["report"], doc["snapshot"]
            if not isinstance(report, dict) or not isinstance(snapshot, dict):
                raise TypeError
            return Run(at=datetime.fromisoformat(str(doc["at"])), command=str(doc["command"]),
                       source=str(doc["source"]), report=report, snapshot=snapshot)
        except (KeyError, TypeError, ValueError):
            raise InputError(f"history: s3://{self.bucket}/{key} is damaged") from None

    def _call(self, action: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return action(self._client())
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "error")
            raise InputError(f"history: {printable(self.url)}: S3 {code}") from None
        except BotoCoreError as exc:
            raise InputError(f"history: {printable(self.url)}: {exc}") from None
