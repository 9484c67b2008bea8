"""Three-valued (Kleene) logic: True, False, or None for "not known yet"."""

from __future__ import annotations

from collections.abc import Iterable

Tri = bool | None


def all_of(values: Iterable[Tri]) -> Tri:
    unknown = False
    for value in values:
        if value is False:
            return False
        if value is None:
            unknown = True
    return None if unknown else True


def any_of(values: Iterable[Tri]) -> Tri:
    unknown = False
    for value in values:
        if value is True:
            return True
        if value is None:
            unknown = True
    return None if unknown else False


def negate(value: Tri) -> Tri:
    return None if value is None else not value
