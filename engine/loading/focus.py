"""FOCUS 1.x cost and usage exports (`scan --billing FILE|FOLDER|s3://…`: CSV, gzipped CSV, or
Parquet through DuckDB, the optional `[billing]` extra): each resource's billed rate, its
`EffectiveCost` summed over the export's usage rows per hour of the export's charge window (the
earliest `ChargePeriodStart` to the latest `ChargePeriodEnd`)."""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from engine.core.billing import BilledRate, BilledRates, billing_key
from engine.core.errors import InputError
from engine.loading.focus_s3 import EXPORT_SUFFIXES, downloaded_export

MAX_EXPORT_BYTES = 2 * 2**30
MAX_ROWS = 10_000_000
MAX_FIELD = 4096  # longest field a row may carry (resource ids are a few hundred characters)
MAX_COST = 1e12
REQUIRED = ("ResourceId", "EffectiveCost", "ChargePeriodStart", "ChargePeriodEnd",
            "BillingCurrency")


class _Totals:
    def __init__(self) -> None:
        self.cost: dict[str, float] = {}
        self.start: datetime | None = None
        self.end: datetime | None = None

    def add(self, key: str, cost: float, start: datetime, end: datetime) -> None:
        self.cost[key] = self.cost.get(key, 0.0) + cost
        self.start = start if self.start is None else min(self.start, start)
        self.end = end if self.end is None else max(self.end, end)


MAX_EXPORT_FILES = 1000


def read_billing(source: str) -> tuple[BilledRates, str]:
    """The billed rates of `--billing SOURCE` — a FOCUS export file, a folder of export files, or
    an `s3://bucket/prefix/` where a cloud writes its export — and a label for the prices."""
    if source.startswith("s3://"):
        with downloaded_export(source, MAX_EXPORT_FILES, MAX_EXPORT_BYTES) as files:
            return read_focus_exports(files, source), f"billed rates from {source[:200]}"
    path = Path(source)
    files = export_files(path) if path.is_dir() else [path]
    return read_focus_exports(files, str(path)), f"billed rates from {path.name}"


def export_files(folder: Path) -> list[Path]:
    """The export files under `folder` (as AWS Data Exports and GCP/Azure exports lay them out:
    partitions in sub-folders), in name order, bounded in count and total size."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and _is_export(p.name))
    if not files:
        raise InputError("billing export folder holds no .csv, .csv.gz or .parquet file",
                         file=str(folder))
    if len(files) > MAX_EXPORT_FILES:
        raise InputError(f"billing export folder holds more than {MAX_EXPORT_FILES} files",
                         file=str(folder))
    if sum(p.stat().st_size for p in files) > MAX_EXPORT_BYTES:
        raise InputError(f"billing export is larger than {MAX_EXPORT_BYTES // 2**30} GiB",
                         file=str(folder))
    return files


def _is_export(name: str) -> bool:
    return name.lower().endswith(EXPORT_SUFFIXES)


def read_focus_export(path: Path) -> BilledRates:
    """Billed USD per hour of each resource in the FOCUS export file at `path`."""
    return read_focus_exports([path], str(path))


def read_focus_exports(paths: list[Path], label: str) -> BilledRates:
    """Billed USD per hour of each resource over several export files (one export's parts, or
    several billing periods): costs summed, the charge window spanning them all."""
    totals = _Totals()
    for path in paths:
        _read_file(totals, path)
    return _rates(totals, label.rsplit("/", 1)[-1] or label, label)


def _read_file(totals: _Totals, path: Path) -> None:
    if not path.is_file():
        raise InputError("billing export is not a readable file", file=str(path))
    if path.stat().st_size > MAX_EXPORT_BYTES:
        raise InputError(f"billing export is larger than {MAX_EXPORT_BYTES // 2**30} GiB",
                         file=str(path))
    if path.suffix.lower() == ".parquet":
        for line, row in _parquet_rows(path):
            _add_row(totals, row, str(path), line)
        return
    try:
        with _open_text(path) as handle:
            for line, row in _rows(handle, str(path)):
                _add_row(totals, row, str(path), line)
    except (csv.Error, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"billing export is not a valid UTF-8 CSV: {exc}",
                         file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read billing export: {exc.strerror or exc}",
                         file=str(path)) from None


def _open_text(path: Path) -> IO[str]:
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return path.open(encoding="utf-8-sig", newline="")


def _rows(handle: Iterator[str], path: str) -> Iterator[tuple[int, Mapping[str, str | None]]]:
    reader = csv.DictReader(handle)
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"not a FOCUS export: missing the columns {', '.join(missing)}",
                         file=path, line=1)
    for line, row in enumerate(reader, start=2):
        if line > MAX_ROWS:
            raise InputError(f"billing export has more than {MAX_ROWS} rows", file=path,
                             line=line)
        yield line, row


def _parquet_rows(path: Path) -> Iterator[tuple[int, Mapping[str, str | None]]]:
    """The usage rows of a Parquet export, summed per resource and currency by DuckDB (which
    scales to exports of millions of rows), as rows `_add_row` reads."""
    try:
        import duckdb
    except ImportError:
        raise InputError("a Parquet export needs DuckDB (the gpuwarden[billing] extra)",
                         file=str(path)) from None
    connection = duckdb.connect(":memory:")
    try:
        columns = {row[0] for row in connection.execute(
            "DESCRIBE SELECT * FROM read_parquet(?)", [str(path)]).fetchall()}
        missing = [c for c in REQUIRED if c not in columns]
        if missing:
            raise InputError(f"not a FOCUS export: missing the columns {', '.join(missing)}",
                             file=str(path))
        usage = "ChargeCategory = 'Usage'" if "ChargeCategory" in columns else "TRUE"
        cursor = connection.execute(
            "SELECT CAST(ResourceId AS VARCHAR), CAST(BillingCurrency AS VARCHAR), "
            "SUM(CAST(EffectiveCost AS DOUBLE)), MIN(ChargePeriodStart), MAX(ChargePeriodEnd) "
            f"FROM read_parquet(?) WHERE {usage} AND ResourceId IS NOT NULL "
            "GROUP BY 1, 2", [str(path)])
        yield from _grouped_rows(cursor, str(path))
    except duckdb.Error as exc:
        raise InputError(f"cannot read the Parquet export: {str(exc)[:200]}",
                         file=str(path)) from None
    finally:
        connection.close()


def _grouped_rows(cursor: Any, path: str) -> Iterator[tuple[int, Mapping[str, str | None]]]:
    for line, (resource, currency, cost, start, end) in enumerate(iter(cursor.fetchone, None),
                                                                  start=1):
        if line > MAX_ROWS:
            raise InputError(f"billing export has more than {MAX_ROWS} resources", file=path)
        yield line, {"ResourceId": resource, "BillingCurrency": currency,
                     "EffectiveCost": None if cost is None else repr(cost),
                     "ChargePeriodStart": _text(start), "ChargePeriodEnd": _text(end)}


def _text(value: object) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else (
        None if value is None else str(value))


def _add_row(totals: _Totals, row: Mapping[str, str | None], path: str, line: int) -> None:
    resource = (row.get("ResourceId") or "").strip()
    # only usage: EffectiveCost already spreads commitments over the usage they cover
    if not resource or (row.get("ChargeCategory") or "Usage").strip() != "Usage":
        return
    if len(resource) > MAX_FIELD:
        raise InputError(f"ResourceId longer than {MAX_FIELD} characters", file=path, line=line)
    currency = (row.get("BillingCurrency") or "").strip()
    if currency != "USD":
        raise InputError(f"BillingCurrency {currency[:16]!r}: gpuwarden prices in USD",
                         file=path, line=line)
    totals.add(billing_key(resource), _cost(row.get("EffectiveCost"), path, line),
               _instant(row.get("ChargePeriodStart"), "ChargePeriodStart", path, line),
               _instant(row.get("ChargePeriodEnd"), "ChargePeriodEnd", path, line))


def _cost(value: str | None, path: str, line: int) -> float:
    try:
        cost = float((value or "").strip() or "0")
    except ValueError:
        cost = math.nan
    if not (abs(cost) < MAX_COST):
        raise InputError("EffectiveCost must be a number", file=path, line=line)
    return cost


def _instant(value: str | None, column: str, path: str, line: int) -> datetime:
    text = (value or "").strip()[:64]
    try:
        instant = datetime.fromisoformat(text.replace(" ", "T", 1))
    except ValueError:
        raise InputError(f"{column} must be an ISO 8601 date-time, not {text!r}", file=path,
                         line=line) from None
    return instant if instant.tzinfo else instant.replace(tzinfo=UTC)


def _rates(totals: _Totals, name: str, path: str) -> BilledRates:
    if totals.start is None or totals.end is None:
        return {}
    hours = (totals.end - totals.start).total_seconds() / 3600.0
    if hours <= 0:
        raise InputError("billing export's charge period is empty", file=path)
    window = f"{totals.start.date().isoformat()} to {totals.end.date().isoformat()}"
    return {key: BilledRate(max(0.0, cost) / hours, window, name)
            for key, cost in totals.cost.items()}
