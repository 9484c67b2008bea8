"""Catalog files (`--catalog FILE`): rows with the columns of instance_types.csv that add or
replace whole instance types, prices optional; read within bounds, applied by the core."""

from __future__ import annotations

from pathlib import Path

from engine.core.catalog import Catalog
from engine.core.catalog_files import with_catalog_rows
from engine.loading.files import read_bounded_text

MAX_CATALOG_FILE_BYTES = 16 * 2**20


def read_catalog_file(base: Catalog, path: Path) -> Catalog:
    """`base` with the types (and prices) of the catalog CSV file at `path`."""
    text = read_bounded_text(path, str(path), "catalog file", max_bytes=MAX_CATALOG_FILE_BYTES)
    return with_catalog_rows(base, text, str(path))
