"""Negotiated discounts: a percent off on-demand list prices per cloud or instance family, as an
enterprise agreement (AWS EDP/PPA, a Google or Microsoft commit) gives it. They come from rows of
a `--prices FILE` whose `instance_type` is `CLOUD:PATTERN` (a case-insensitive glob over type
names: `aws:*`, `aws:p5.*`, `azure:standard_nd*`) with a `discount_pct`. The most specific pattern
that matches a type wins (the longest). Spot prices are market prices: not discounted."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace

from engine.core.catalog_prices import PriceQuote
from engine.core.errors import InputError

CLOUDS = ("aws", "gcp", "azure")
MAX_DISCOUNTS = 1000
MAX_PATTERN = 128


@dataclass(frozen=True, slots=True)
class Discount:
    cloud: str
    pattern: str  # lower case glob over instance type names
    percent: float  # 0 < percent < 100
    source: str  # the price file

    def matches(self, cloud: str, instance_type: str) -> bool:
        return cloud == self.cloud and fnmatch.fnmatchcase(instance_type.lower(), self.pattern)


def is_discount_row(instance_type: str) -> bool:
    return ":" in instance_type


def parse_discount(instance_type: str, percent_text: str | None, source: str,
                   line: int) -> Discount:
    """One `CLOUD:PATTERN,,PERCENT` row of a price file."""
    cloud, _, pattern = instance_type.strip().partition(":")
    cloud, pattern = cloud.strip().lower(), pattern.strip().lower()
    if cloud not in CLOUDS or not pattern or len(pattern) > MAX_PATTERN:
        raise InputError(f"a discount row names CLOUD:PATTERN with a cloud of "
                         f"{', '.join(CLOUDS)} (e.g. aws:p5.*)", file=source, line=line)
    try:
        percent = float((percent_text or "").strip())
    except ValueError:
        percent = -1.0
    if not 0 < percent < 100:
        raise InputError("discount_pct must be a number between 0 and 100", file=source,
                         line=line)
    return Discount(cloud, pattern, percent, source)


def discount_for(discounts: tuple[Discount, ...], cloud: str,
                 instance_type: str) -> Discount | None:
    """The most specific discount for one type (the longest matching pattern)."""
    found = [d for d in discounts if d.matches(cloud, instance_type)]
    return max(found, key=lambda d: len(d.pattern.replace("*", ""))) if found else None


def discounted(quote: PriceQuote, discount: Discount | None) -> PriceQuote:
    """`quote` less `discount` when it is an on-demand price."""
    if discount is None or quote.capacity != "on_demand":
        return quote
    return replace(quote, usd_per_h=round(quote.usd_per_h * (1 - discount.percent / 100), 6),
                   discount_pct=discount.percent, discount_source=discount.source)
