"""OPA built-ins the embedded engine gets from gpuwarden, registered in each regorus engine by
the worker (`engine/rego/worker.py`), where regorus lacks them or answers differently from OPA
(tests/test_rego_differential.py compares each with OPA's own engine):

- `yaml.unmarshal` (go-yaml v2's scalars, `engine.rego.yaml_go`) and `glob.quote_meta` (regorus
  leaves `?` unescaped): replace regorus' own;
- `crypto.md5`, `crypto.sha1`, `crypto.sha256`, `net.cidr_intersects`: regorus lacks them;
- for Rego v0 modules only, v0's deprecated `any` and `all` (Gatekeeper templates use them).

`STANDINS` names, for each function regorus does not know, a built-in it knows with the same
arity: regorus' compile check (which finds calls to unknown functions) is given the modules
with those calls renamed, so that it still finds every other unknown call.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Callable
from typing import Any

_GLOB_SPECIALS = frozenset("*?\\[]{}")


def yaml_unmarshal(text: Any) -> Any:
    from engine.rego import yaml_go  # imported on first use: the worker starts without PyYAML

    return yaml_go.unmarshal(text)


def glob_quote_meta(pattern: Any) -> str:
    """Every glob special character escaped."""
    return "".join("\\" + c if c in _GLOB_SPECIALS else c for c in _string(pattern, "glob"))


def _digest(name: str) -> Callable[[Any], str]:
    def digest(text: Any) -> str:
        return hashlib.new(name, _string(text, f"crypto.{name}").encode()).hexdigest()
    return digest


def cidr_intersects(first: Any, second: Any) -> bool:
    a = _network(first, "net.cidr_intersects")
    b = _network(second, "net.cidr_intersects")
    return a.version == b.version and a.overlaps(b)


def any_true(collection: Any) -> bool:
    """v0's `any`: some element of an array or set is `true`."""
    return any(item is True for item in _elements(collection, "any"))


def all_true(collection: Any) -> bool:
    """v0's `all`: every element of an array or set is `true` (so an empty one is)."""
    return all(item is True for item in _elements(collection, "all"))


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name}: operand must be a string")
    return value


def _network(value: Any, name: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A CIDR as Go's net.ParseCIDR reads it: a prefix length is required, host bits allowed."""
    try:
        if "/" not in _string(value, name):
            raise ValueError(value)
        return ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"{name}: invalid CIDR {value!r}") from None


def _elements(collection: Any, name: str) -> Any:
    if not isinstance(collection, list | set | frozenset | tuple):
        raise ValueError(f"{name}: operand must be an array or a set")
    return collection


# name: (arity, function)
ALL_VERSIONS: dict[str, tuple[int, Callable[..., Any]]] = {
    "yaml.unmarshal": (1, yaml_unmarshal),
    "glob.quote_meta": (1, glob_quote_meta),
    "crypto.md5": (1, _digest("md5")),
    "crypto.sha1": (1, _digest("sha1")),
    "crypto.sha256": (1, _digest("sha256")),
    "net.cidr_intersects": (2, cidr_intersects),
}
V0_ONLY: dict[str, tuple[int, Callable[..., Any]]] = {
    "any": (1, any_true),
    "all": (1, all_true),
}
STANDINS = {"crypto.md5": "lower", "crypto.sha1": "lower", "crypto.sha256": "lower",
            "net.cidr_intersects": "startswith"}
