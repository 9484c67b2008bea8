"""Audit logs in S3, for the savings ledger: the scheduled Lambda uploads one per run
(`<prefix>/<yyyy>/<mm>/<dd>/<run-id>.audit.jsonl`). boto3 is imported only here, only when an
`s3://` location is read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

from engine.core.errors import InputError, printable

MAX_OBJECTS = 10_000  # audit logs read under one prefix
MAX_OBJECT_BYTES = 512 * 1024 * 1024
LOG_SUFFIX = ".jsonl"
T = TypeVar("T")


def read_s3_lines(url: str, max_lines: int) -> Iterator[str]:
    """The lines of the audit log at `s3://bucket/key`, or of every `*.jsonl` object under
    `s3://bucket/prefix/` in key order; at most `max_lines` + 1 (the reader reports the
    overflow)."""
    bucket, _, key = url.removeprefix("s3://").partition("/")
    if not bucket:
        raise InputError(f"--audit-log: no bucket in {printable(url)!r}")
    s3 = _client()
    keys = _call(url, lambda: _keys(s3, bucket, key))
    if not keys:
        raise InputError("no audit log there (no object, and no *.jsonl under it)", file=url)
    count = 0
    for name in keys:
        for line in _call(url, partial(_lines, s3, bucket, name)):
            count += 1
            yield line
            if count > max_lines:
                return


def _client() -> Any:
    try:
        import boto3
    except ImportError:
        raise InputError("an audit log in S3 needs boto3 (python3 -m pip install boto3)") \
            from None
    return boto3.client("s3")


def _keys(s3: Any, bucket: str, key: str) -> list[str]:
    """[key] when it names an object; else the `*.jsonl` keys under it as a folder."""
    if key and not key.endswith("/") and _exists(s3, bucket, key):
        return [key]
    prefix = key if not key or key.endswith("/") else key + "/"
    found: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        found.extend(str(item["Key"]) for item in page.get("Contents") or []
                     if str(item.get("Key", "")).endswith(LOG_SUFFIX))
        if len(found) > MAX_OBJECTS:
            raise InputError(f"more than {MAX_OBJECTS} audit logs under this prefix; name a "
                             "narrower one", file=f"s3://{bucket}/{prefix}")
    return sorted(found)


def _exists(s3: Any, bucket: str, key: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


def _lines(s3: Any, bucket: str, key: str) -> list[str]:
    answer = s3.get_object(Bucket=bucket, Key=key)
    if int(answer.get("ContentLength") or 0) > MAX_OBJECT_BYTES:
        raise InputError("audit log is past the ledger's limits", file=f"s3://{bucket}/{key}")
    data: bytes = answer["Body"].read(MAX_OBJECT_BYTES + 1)
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read audit log: {exc}", file=f"s3://{bucket}/{key}") from None


def _call(url: str, action: Callable[[], T]) -> T:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return action()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "error")
        raise InputError(f"cannot read audit log: S3 {code}", file=printable(url)) from None
    except BotoCoreError as exc:
        raise InputError(f"cannot read audit log: {exc}", file=printable(url)) from None
