"""A FOCUS export where the cloud writes it: `s3://bucket/prefix/` (AWS Data Exports lay a FOCUS
export out as `prefix/<export>/data/BILLING_PERIOD=YYYY-MM/…-00001.csv.gz` or `.parquet`). Its
files are downloaded to a private temporary folder, bounded in count and bytes, and removed
after reading. boto3 is imported only here, only for an `s3://` source."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engine.core.errors import InputError

EXPORT_SUFFIXES = (".csv", ".csv.gz", ".parquet")


@contextmanager
def downloaded_export(url: str, max_files: int, max_bytes: int) -> Iterator[list[Path]]:
    """The export files under the S3 prefix `url`, downloaded; removed on exit."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not bucket:
        raise InputError(f"--billing {url[:200]}: name a bucket (s3://bucket/prefix/)")
    s3 = _client()
    keys = _export_keys(s3, bucket, prefix, max_files, max_bytes)
    with tempfile.TemporaryDirectory(prefix="gpuwarden-billing-") as folder:
        yield [_download(s3, bucket, key, Path(folder), index) for index, key in enumerate(keys)]


def _client() -> Any:
    try:
        import boto3
    except ImportError:
        raise InputError("an S3 billing export needs boto3 "
                         "(python3 -m pip install boto3)") from None
    return boto3.client("s3")


def _export_keys(s3: Any, bucket: str, prefix: str, max_files: int, max_bytes: int) -> list[str]:
    keys: list[str] = []
    total = 0
    for page in _call(bucket, lambda: list(
            s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix))):
        for item in page.get("Contents") or []:
            key = str(item.get("Key") or "")
            if not key.lower().endswith(EXPORT_SUFFIXES):
                continue
            keys.append(key)
            total += int(item.get("Size") or 0)
            if len(keys) > max_files or total > max_bytes:
                raise InputError(f"the billing export under s3://{bucket}/{prefix[:200]} holds "
                                 f"more than {max_files} files or {max_bytes // 2**30} GiB")
    if not keys:
        raise InputError(f"no .csv, .csv.gz or .parquet export under s3://{bucket}/"
                         f"{prefix[:200]}")
    return sorted(keys)


def _download(s3: Any, bucket: str, key: str, folder: Path, index: int) -> Path:
    suffix = next(s for s in EXPORT_SUFFIXES if key.lower().endswith(s))
    target = folder / f"part-{index:05d}{suffix}"  # never a path taken from the key
    _call(bucket, lambda: s3.download_file(bucket, key, str(target)))
    return target


def _call(bucket: str, action: Any) -> Any:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return action()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "error")
        raise InputError(f"billing export in s3://{bucket}: {code}") from None
    except BotoCoreError as exc:
        raise InputError(f"billing export in s3://{bucket}: {str(exc)[:200]}") from None
