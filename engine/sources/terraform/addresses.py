"""Terraform resource and module addresses: `module.a[0].module.b["x"].aws_instance.gpu[1]`."""

from __future__ import annotations

import re

_INDEX = r'\[(?:"(?:[^"\\]|\\.)*"|[0-9]+)\]'

_MODULE_STEP = re.compile(rf"module\.([A-Za-z0-9_-]+)(?:{_INDEX})?(?:\.|$)")

_TRAILING_INDEX = re.compile(rf"{_INDEX}$")


def module_names(module_address: str) -> list[str] | None:
    """`module.a[0].module.b["x"]` → ["a", "b"]; None when it is not a module address."""
    names: list[str] = []
    position = 0
    while position < len(module_address):
        found = _MODULE_STEP.match(module_address, position)
        if found is None:
            return None
        names.append(found.group(1))
        position = found.end()
    return names


def module_part(address: str) -> str:
    """The module path of a resource address (`module.a[0].aws_x.y[1]` → `module.a[0]`)."""
    position = 0
    while True:
        found = _MODULE_STEP.match(address, position)
        if found is None or found.end() >= len(address):
            return address[: max(position - 1, 0)]
        position = found.end()


def without_index(address: str) -> str:
    return _TRAILING_INDEX.sub("", address)


def index_suffix(address: str) -> str:
    found = _TRAILING_INDEX.search(address)
    return found.group(0) if found else ""
