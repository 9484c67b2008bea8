"""Price override files (`--prices FILE`): read within bounds, applied by the core catalog."""

from __future__ import annotations

from pathlib import Path

from engine.core.catalog import Catalog, with_price_overrides
from engine.loading.files import read_bounded_text

MAX_PRICE_FILE_BYTES = 64 * 2**20


def read_price_overrides(base: Catalog, path: Path) -> Catalog:
    """`base` with the on-demand prices of the CSV file at `path`."""
    text = read_bounded_text(path, str(path), "price file", max_bytes=MAX_PRICE_FILE_BYTES)
    return with_price_overrides(base, text, str(path))
