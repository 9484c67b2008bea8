"""The plan as a whole: its changes by address, their configuration, the provider blocks.

Normalizers join across the plan (the launch template an autoscaling group names, the
encryption configuration of a bucket) through `PlanIndex`, whose lookups are built once, so the
joins stay linear on big plans.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from engine.core.catalog import Catalog
from engine.sources.terraform.addresses import module_names, module_part, without_index
from engine.sources.terraform.attributes import Attrs, dig, step
from engine.sources.terraform.redaction import redact_sensitive

_T = TypeVar("_T")


@dataclass(slots=True)
class PlannedChange:
    """One resource change of the plan, with what normalizers need to read and join it."""

    address: str
    type: str
    module_address: str
    config: dict[str, Any] | None  # the resource's configuration block; None when unavailable
    attrs: Attrs
    raw: dict[str, Any]
    plan: PlanIndex

    @property
    def module_prefix(self) -> str:
        return f"{self.module_address}." if self.module_address else ""

    @property
    def catalog(self) -> Catalog:
        return self.plan.catalog


class PlanIndex:
    """Lookups across one plan: changes by address, configuration, provider blocks."""

    def __init__(self, plan: Mapping[str, Any], catalog: Catalog) -> None:
        configuration = plan.get("configuration")
        self.catalog = catalog
        self._configuration = configuration if isinstance(configuration, dict) else None
        self._by_address: dict[str, dict[str, Any]] = {}
        self._by_base: dict[str, str] = {}
        self._module_configs: dict[tuple[str, ...], dict[str, dict[str, Any]] | None] = {}
        self._planned: dict[str, PlannedChange | None] = {}
        self._attribute_index: dict[tuple[str, str], dict[str, str]] = {}
        self._memo: dict[str, Any] = {}

    def add(self, change: dict[str, Any]) -> None:
        """Index a change whose planned object is known (anything but a delete)."""
        address, body = change["address"], change["change"]
        if isinstance(body.get("after"), dict) and isinstance(change.get("type"), str):
            self._by_address.setdefault(address, change)
            self._by_base.setdefault(without_index(address), address)

    def release(self) -> None:
        """Drop what was built: each `PlannedChange` refers back to this index, a cycle the
        garbage collector would otherwise have to find, holding every redacted copy till then."""
        self._planned.clear()
        self._memo.clear()
        self._attribute_index.clear()

    def planned(self, address: str) -> PlannedChange | None:
        if address not in self._planned:
            change = self._by_address.get(address)
            self._planned[address] = self._build(change) if change is not None else None
        return self._planned[address]

    def _build(self, change: dict[str, Any]) -> PlannedChange:
        body = change["change"]
        module_address = change.get("module_address")
        if not isinstance(module_address, str):
            module_address = module_part(change["address"])
        name = change.get("name")
        config = self._resource_config(module_address, change["type"], name)
        sensitive = body.get("after_sensitive")
        raw = redact_sensitive(body["after"], sensitive)
        if not isinstance(raw, dict):
            raw = {}  # the whole object is sensitive
        expressions = None
        if config is not None:
            found = config.get("expressions")
            expressions = found if isinstance(found, dict) else {}
        attrs = Attrs(raw, body.get("after_unknown"), sensitive, expressions)
        return PlannedChange(
            change["address"], change["type"], module_address, config, attrs, raw, self
        )

    # joins ---------------------------------------------------------------------------------

    def find(self, address: str, *, index_hint: str = "") -> PlannedChange | None:
        """The change at `address` (a resource address without index), preferring the
        instance with the caller's own index, then the resource itself, then any instance."""
        for candidate in (address + index_hint, address):
            if candidate in self._by_address:
                return self.planned(candidate)
        first_instance = self._by_base.get(address)
        return self.planned(first_instance) if first_instance else None

    def find_by_attribute(self, type_: str, attribute: str, value: str) -> PlannedChange | None:
        """The change of `type_` whose planned `attribute` equals `value` (a literal name)."""
        key = (type_, attribute)
        if key not in self._attribute_index:
            values: dict[str, str] = {}
            for address, change in self._by_address.items():
                found = change["change"]["after"].get(attribute)
                if change["type"] == type_ and isinstance(found, str):
                    values.setdefault(found, address)
            self._attribute_index[key] = values
        found_address = self._attribute_index[key].get(value)
        return self.planned(found_address) if found_address else None

    def memo(self, key: str, compute: Callable[[], _T]) -> _T:
        """A plan-wide lookup table, computed once (joins must stay linear on big plans)."""
        if key not in self._memo:
            self._memo[key] = compute()
        found: _T = self._memo[key]
        return found

    def of_type(self, type_: str) -> list[PlannedChange]:
        found = [self.planned(a) for a, c in self._by_address.items() if c["type"] == type_]
        return [change for change in found if change is not None]

    # configuration -------------------------------------------------------------------------

    def _resource_config(self, module_address: str, type_: str, name: Any) -> dict[str, Any] | None:
        if self._configuration is None or not isinstance(name, str):
            return None
        names = module_names(module_address) if module_address else []
        if names is None:
            return None
        key = tuple(names)
        if key not in self._module_configs:
            self._module_configs[key] = self._module_resources(key)
        resources = self._module_configs[key]
        return resources.get(f"{type_}.{name}") if resources is not None else None

    def _module_resources(self, names: tuple[str, ...]) -> dict[str, dict[str, Any]] | None:
        module: Any = step(self._configuration, "root_module")
        for name in names:
            module = dig(module, ("module_calls", name, "module"))
        resources = step(module, "resources")
        if not isinstance(resources, list):
            return None if module is None else {}
        return {
            entry["address"]: entry
            for entry in resources
            if isinstance(entry, dict)
            and isinstance(entry.get("address"), str)
            and entry.get("mode", "managed") == "managed"
        }

    def provider_setting(self, change: PlannedChange, provider: str, *path: str | int) -> Any:
        """A constant argument of the provider block a resource uses (`region`, `default_tags`).

        None when no provider block sets it; `NOT_CONSTANT` when it is set by an expression.
        Raises nothing: with no configuration in the plan, returns `NO_CONFIGURATION`.
        """
        providers = step(self._configuration, "provider_config")
        if change.config is None or not isinstance(providers, dict):
            return NO_CONFIGURATION
        key = change.config.get("provider_config_key")
        candidates = [key, key.rsplit(":", 1)[-1]] if isinstance(key, str) else []
        for candidate in [*candidates, provider]:
            node = dig(step(providers, candidate), ("expressions", *path))
            if node is None:
                continue
            if isinstance(node, dict) and "constant_value" in node:
                return node["constant_value"]
            return NOT_CONSTANT
        return None


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOT_CONSTANT = _Marker("NOT_CONSTANT")

NO_CONFIGURATION = _Marker("NO_CONFIGURATION")
