"""What a check works out from the catalog alone, remembered by what it is worked out from."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from engine.core.bounded import remember
from engine.core.catalog import Catalog

Key = TypeVar("Key", bound=Hashable)
Answer = TypeVar("Answer")
_MISSING = object()


class CatalogMemo(Generic[Key, Answer]):
    """`compute(catalog, key)` remembered by key for the catalog asked last (another catalog
    starts afresh: none is kept alive), at most `most` keys (keys come from input)."""

    def __init__(self, compute: Callable[[Catalog, Key], Answer], most: int = 4096):
        self._compute = compute
        self._most = most
        # one tuple, replaced at once: threads (the webhook's) never see one catalog's answers
        # under another
        self._state: tuple[Catalog | None, dict[Key, Answer]] = (None, {})

    def get(self, catalog: Catalog, key: Key) -> Answer:
        owner, answers = self._state
        if owner is not catalog:
            answers = {}
            self._state = (catalog, answers)
        found = answers.get(key, _MISSING)
        if found is _MISSING:
            found = remember(answers, key, self._compute(catalog, key), self._most)
        return found  # type: ignore[return-value]
