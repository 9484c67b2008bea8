"""Fresh prices from the providers' own APIs (`gpuwarden catalog refresh`): one module per cloud,
each returning `PriceRow`s; `rows_file` writes them as a `--catalog FILE` the catalog reads back.
Provider field names live only in the cloud's module; SDKs are imported when a refresh runs."""

from engine.pricing.rows import PriceRow, rows_file

__all__ = ["PriceRow", "rows_file"]
