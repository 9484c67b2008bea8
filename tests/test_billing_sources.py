"""`scan --billing` beyond one CSV file: gzipped CSV, a folder of export parts, and the export
where AWS Data Exports writes it (`s3://bucket/prefix/…/BILLING_PERIOD=…/part.csv.gz`, moto in
server mode). The parts of one export sum to the same rates as the whole file."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from engine.core.billing import billing_key
from engine.core.errors import InputError
from engine.loading.focus import read_billing, read_focus_export
from tests.conftest_aws import AwsLab, aws_fixture, moto_endpoint_fixture  # noqa: F401
from tests.test_billing import SAMPLE
from tests.test_cli import run_cli

PREFIX = "focus/gpu-costs/data/"


def split_sample() -> tuple[str, list[str]]:
    """The sample export's header and its rows, in two halves (an export written in parts)."""
    header, *rows = SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    half = len(rows) // 2
    return header, ["".join(rows[:half]), "".join(rows[half:])]


def gz(text: str) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as handle:
        handle.write(text.encode())
    return out.getvalue()


def rates_of(source: str) -> dict[str, float]:
    rates, _ = read_billing(source)
    return {key: rate.usd_per_h for key, rate in rates.items()}


def test_a_folder_of_gzipped_parts_sums_to_the_whole_export(tmp_path: Path) -> None:
    header, parts = split_sample()
    for index, part in enumerate(parts):
        folder = tmp_path / "data" / f"BILLING_PERIOD=2026-09-{index}"
        folder.mkdir(parents=True)
        (folder / f"part-{index}.csv.gz").write_bytes(gz(header + part))
    (tmp_path / "data" / "manifest.json").write_text("{}")  # not an export file: skipped
    whole = {key: rate.usd_per_h for key, rate in read_focus_export(SAMPLE).items()}
    assert rates_of(str(tmp_path)) == pytest.approx(whole)
    assert rates_of(str(tmp_path))[billing_key("i-0a1b2c3d4e5f60001")] == pytest.approx(
        46.80 / 24)


@pytest.mark.parametrize("content", [b"\x1f\x8b\x08\x00broken", b"ResourceId\n1\n"])
def test_a_damaged_gzip_part_is_an_input_error(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "part.csv.gz").write_bytes(content)
    with pytest.raises(InputError):
        read_billing(str(tmp_path))


def test_an_empty_folder_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no \.csv"):
        read_billing(str(tmp_path))


def test_scan_reads_the_export_from_s3_where_aws_data_exports_writes_it(
        aws: AwsLab, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    s3 = aws.client("s3")
    s3.create_bucket(Bucket="cur-exports")
    header, parts = split_sample()
    for index, part in enumerate(parts):
        s3.put_object(Bucket="cur-exports", Body=gz(header + part),
                      Key=f"{PREFIX}BILLING_PERIOD=2026-09/gpu-costs-0000{index}.csv.gz")
    s3.put_object(Bucket="cur-exports", Key=f"{PREFIX}gpu-costs-Manifest.json", Body=b"{}")
    whole = {key: rate.usd_per_h for key, rate in read_focus_export(SAMPLE).items()}
    assert rates_of(f"s3://cur-exports/{PREFIX}") == pytest.approx(whole)

    code, out, err = run_cli(["scan", "--demo", "--format", "json", "--soft-fail", "--quiet",
                              "--billing", f"s3://cur-exports/{PREFIX}"], capsys, monkeypatch)
    assert code == 0, err
    assert f"billed rates from s3://cur-exports/{PREFIX}" in out


@pytest.mark.parametrize(("url", "message"), [
    ("s3://no-such-bucket/focus/", "NoSuchBucket"),
    ("s3://cur-empty/focus/", "no .csv"),
    ("s3:///focus/", "name a bucket"),
])
def test_s3_sources_that_hold_no_export_are_one_line_exit_2(
        aws: AwsLab, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        url: str, message: str) -> None:
    aws.client("s3").create_bucket(Bucket="cur-empty")
    code, _, err = run_cli(["scan", "--demo", "--quiet", "--billing", url], capsys, monkeypatch)
    assert code == 2 and err.count("\n") == 1 and message in err, err
