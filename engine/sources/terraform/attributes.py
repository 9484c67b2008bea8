"""Reading one planned object: its values with their `after_unknown` and `after_sensitive` marks
and the configuration that produced them.

A value Terraform shows as unknown or sensitive is never guessed; `Attrs` answers "hidden" for
it, and tells a value the configuration leaves to the provider's default from one it sets.
"""

from __future__ import annotations

import json
import math
from typing import Any

from engine.sources.terraform.redaction import SENSITIVE

KNOWN_AFTER_APPLY = "(known after apply)"

AttrPath = tuple[str | int, ...]


def step(node: Any, key: str | int) -> Any:
    """`node[key]` for a list index or a mapping key; None when the shape does not fit."""
    if isinstance(key, int):
        return node[key] if isinstance(node, list) and 0 <= key < len(node) else None
    return node.get(key) if isinstance(node, dict) else None


def dig(node: Any, path: AttrPath) -> Any:
    """`step` along `path`."""
    for key in path:
        node = step(node, key)
    return node


def _marked(marks: Any, path: AttrPath) -> bool:
    """True when `marks` (an after_unknown / after_sensitive tree) flags `path` or a parent."""
    if marks is True:
        return True
    for key in path:
        if not marks:  # most values carry no mark: nothing below can be True
            return False
        marks = step(marks, key)
        if marks is True:
            return True
    return False


class Attrs:
    """One planned object (or a block of it) with its unknown and sensitive marks and its config.

    Every read is shape-safe: a path through a value of the wrong type reads as absent. `config` is
    the block's configuration expressions; None when the plan carries no configuration.
    """

    __slots__ = ("_config", "_sensitive", "_unknown", "value")

    def __init__(self, value: Any, unknown: Any, sensitive: Any, config: Any) -> None:
        self.value = value
        self._unknown = unknown
        self._sensitive = sensitive
        self._config = config

    def child(self, *path: str | int) -> Attrs:
        value, unknown, sensitive, config = self.value, self._unknown, self._sensitive, self._config
        for key in path:
            value = step(value, key)
            unknown = True if unknown is True else step(unknown, key)
            sensitive = True if sensitive is True else step(sensitive, key)
            config = (step(config, key) or {}) if config is not None else None
        return Attrs(value, unknown, sensitive, config)

    # marks -------------------------------------------------------------------------------------

    def is_unknown(self, *path: str | int) -> bool:
        return _marked(self._unknown, path)

    def is_sensitive(self, *path: str | int) -> bool:
        return _marked(self._sensitive, path)

    def hidden(self, *path: str | int) -> bool:
        """True when the value at `path` is unknown until apply or withheld as sensitive."""
        return _marked(self._unknown, path) or _marked(self._sensitive, path)

    def has(self, key: str) -> bool:
        """Whether the provider schema shows attribute `key` at all (known or unknown)."""
        return (isinstance(self.value, dict) and key in self.value) or (
            isinstance(self._unknown, dict) and key in self._unknown
        )

    def configured(self, *path: str | int) -> bool | None:
        """Whether the configuration sets `path` (None when the plan has no configuration)."""
        if self._config is None:
            return None
        return dig(self._config, path) is not None

    def left_to_provider(self, *path: str | int) -> bool:
        """Unknown only because the configuration leaves it to the provider's default."""
        return self.hidden(*path) and self.configured(*path) is False

    def references(self, *path: str | int) -> list[str]:
        """The `references` of the configured expression at `path` (empty when none)."""
        refs = step(dig(self._config, path), "references")
        return [ref for ref in refs if isinstance(ref, str)] if isinstance(refs, list) else []

    # values ------------------------------------------------------------------------------------

    def get(self, *path: str | int) -> Any:
        hidden = _marked(self._unknown, path) or _marked(self._sensitive, path)
        return None if hidden else dig(self.value, path)

    def text(self, *path: str | int) -> str | None:
        value = self.get(*path)
        return value if isinstance(value, str) and value != "" else None

    def flag(self, *path: str | int) -> bool | None:
        value = self.get(*path)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        return None

    def number(self, *path: str | int) -> int | None:
        """A whole non-negative number (counts, sizes); strings holding one are accepted."""
        value = self.get(*path)
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if not math.isfinite(value) or value != int(value):
            return None
        return max(0, min(int(value), 1_000_000_000))

    def is_set(self, *path: str | int) -> bool | None:
        """Whether a reference (KMS key, encryption set) is given: True, False, None = unknown.

        A sensitive value counts as given when it is not null (the redacted copy tells that
        without the secret). An unknown one is given when the configuration sets it (it refers
        to a key created in the same apply: variables are known at plan time) and is the
        provider's default, no key, when the configuration leaves it out.
        """
        if self.is_unknown(*path):
            return self.configured(*path)
        if self.is_sensitive(*path):
            return dig(self.value, path) is not None
        return self.text(*path) is not None

    def blocks(self, name: str) -> list[Attrs]:
        """The nested blocks under `name` (a list of objects, or a single object)."""
        value = self.get(name)
        if isinstance(value, dict):
            return [self.child(name)]
        if not isinstance(value, list):
            return []
        return [self.child(name, i) for i, item in enumerate(value) if isinstance(item, dict)]

    def first(self, name: str) -> Attrs | None:
        found = self.blocks(name)
        return found[0] if found else None

    def mapping(self, name: str, unknown: set[str], unknown_path: str = "tags") -> dict[str, str]:
        """A string map (tags, labels); unknown or sensitive entries are marked per key.

        Such an entry keeps its key (its presence is known) with a placeholder value.
        """
        if self.hidden(name):
            unknown.add(unknown_path)
            return {}
        value = step(self.value, name)
        if not isinstance(value, dict):
            return {}
        result: dict[str, str] = {}
        for key, item in value.items():
            key = str(key)  # a plan embedded in YAML may hold non-string keys
            if self.is_sensitive(name, key):
                unknown.add(f"{unknown_path}.{key}")
                result[key] = SENSITIVE
            elif self.is_unknown(name, key):
                unknown.add(f"{unknown_path}.{key}")
                result[key] = KNOWN_AFTER_APPLY
            elif item is not None:
                result[key] = tag_text(item)
        return result


def tag_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)
