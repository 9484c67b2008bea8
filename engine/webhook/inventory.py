"""Cluster objects the webhook replicates: Gatekeeper's `data.inventory` for the Rego policies
that declare kinds (`rego.inventory`, the entries of Gatekeeper's Config `spec.sync.syncOnly`),
and the DRA ResourceClaims / ResourceClaimTemplates that tell how many GPUs a pod's claims get.

They are listed with the namespaces and nodes (`caches.ClusterCache`), every resync, through the
lister (the official client in production); requests only read the last snapshot.

The tree is Gatekeeper's: `cluster[apiVersion][kind][name]` for cluster-scoped objects and
`namespace[namespace][apiVersion][kind][name]` for namespaced ones, each object as the API
server serves it with `apiVersion` and `kind` filled in (a list's items lack them) and
`metadata.managedFields` dropped (the bulk of most objects; no policy should read it).

Bounds over all kinds: `max_objects` objects and `max_bytes` of JSON. A kind that would pass
them, or whose listing failed (forbidden, the API server away), is left out whole and named in
`Inventory.gaps`: a policy that needs it is not evaluated (its `failure_policy` decides) rather
than judged on part of it. A kind the API server does not serve (a template names
`extensions/v1beta1` Ingress beside `networking.k8s.io/v1`) has no objects: no gap.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import orjson

from engine.rego.gatekeeper import inventory_tree
from engine.sources.kubernetes import ClaimIndex, claim_index

log = logging.getLogger("gpuwarden.webhook")
# Each evaluation worker holds the JSON of its policies' kinds (regorus: about 3x its size), and
# the Terraform module's container is limited to 256 MiB.
MAX_OBJECTS = 10_000
MAX_BYTES = 8 * 2**20
DRA_GROUP = "resource.k8s.io"
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")  # the first one served is listed
DRA_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


class Gvk(NamedTuple):
    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.api_version} {self.kind}"


class NotServed(LookupError):
    """The API server does not serve this group, version or kind."""


class KindLister(Protocol):
    def list_kind(self, gvk: Gvk) -> tuple[bool, list[dict[str, Any]]]:
        """(whether the kind is namespaced, its objects); NotServed when there is no such
        kind."""
        ...


@dataclass(frozen=True)
class Listed:
    gvk: Gvk
    namespaced: bool
    items: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Inventory:
    kinds: Mapping[Gvk, Listed] = field(default_factory=dict)
    gaps: Mapping[Gvk, str] = field(default_factory=dict)  # kinds left out, and why
    claims: ClaimIndex = field(default_factory=dict)  # DRA claims, (kind, namespace, name)

    @property
    def objects(self) -> int:
        return sum(len(listed.items) for listed in self.kinds.values())

    def document(self, wanted: Iterable[Gvk]) -> dict[str, Any]:
        """`data.inventory` holding the `wanted` kinds that were listed."""
        listed = [self.kinds[gvk] for gvk in sorted(set(wanted)) if gvk in self.kinds]
        return inventory_tree((kind.gvk.api_version, kind.gvk.kind, kind.namespaced, kind.items)
                              for kind in listed)

    def gap(self, wanted: Iterable[Gvk]) -> str | None:
        """Why some of the `wanted` kinds are missing; None when all were listed."""
        missing = [f"{gvk} ({self.gaps.get(gvk, 'not listed: no cluster')})"
                   for gvk in sorted(set(wanted)) if gvk not in self.kinds]
        return "; ".join(missing) or None


def read_inventory(lister: KindLister, wanted: Iterable[Gvk], *, dra_claims: bool = True,
                   max_objects: int = MAX_OBJECTS, max_bytes: int = MAX_BYTES) -> Inventory:
    """List the `wanted` kinds (and the DRA claim kinds) within the bounds."""
    budget = _Budget(max_objects, max_bytes)
    kinds: dict[Gvk, Listed] = {}
    gaps: dict[Gvk, str] = {}
    for gvk in sorted(set(wanted)):
        try:
            kinds[gvk] = budget.take(_listed(lister, gvk))
        except NotServed:  # a kind this cluster does not have: no objects of it, none missing
            kinds[gvk] = Listed(gvk, False, ())
        except _OverBound as exc:
            gaps[gvk] = str(exc)
        except Exception as exc:  # the API server's errors have no common base class
            gaps[gvk] = f"listing failed: {' '.join(str(exc).split())[:200]}"
    claims = _dra_claims(lister, budget) if dra_claims else []
    return Inventory(kinds, gaps, claim_index(claims))


class _OverBound(Exception):
    pass


@dataclass
class _Budget:
    objects: int
    bytes: int

    def take(self, listed: Listed) -> Listed:
        size = sum(len(orjson.dumps(item)) for item in listed.items)
        if len(listed.items) > self.objects or size > self.bytes:
            raise _OverBound(f"{len(listed.items)} objects, {size} bytes: past the inventory's "
                             "bounds")
        self.objects -= len(listed.items)
        self.bytes -= size
        return listed


def _listed(lister: KindLister, gvk: Gvk) -> Listed:
    namespaced, items = lister.list_kind(gvk)
    return Listed(gvk, namespaced, tuple(_item(gvk, item) for item in items if _named(item)))


def _named(item: Any) -> bool:
    metadata = item.get("metadata") if isinstance(item, dict) else None
    return isinstance(metadata, dict) and isinstance(metadata.get("name"), str)


def _item(gvk: Gvk, item: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in item["metadata"].items() if k != "managedFields"}
    return {**item, "apiVersion": gvk.api_version, "kind": gvk.kind, "metadata": metadata}


def _dra_claims(lister: KindLister, budget: _Budget) -> list[dict[str, Any]]:
    """ResourceClaims and ResourceClaimTemplates of the first resource.k8s.io version served;
    a kind not listed leaves the pods naming one of its objects with unknown GPUs."""
    found: list[dict[str, Any]] = []
    for kind in DRA_KINDS:
        for version in DRA_VERSIONS:
            try:
                found.extend(budget.take(_listed(lister, Gvk(DRA_GROUP, version, kind))).items)
                break
            except NotServed:
                continue
            except Exception as exc:  # forbidden, over the bounds: claims stay unknown
                log.debug("DRA %s not listed: %s", kind, ' '.join(str(exc).split())[:200])
                break
    return found


# ---------------------------------------------------------------------------- to the policies


class InventoryProgram(Protocol):
    """What `engine.rego.policy.RegoProgram` offers for data.inventory."""

    def use_inventory(self, inventory: Mapping[str, Any], gap: str | None) -> None: ...


@dataclass
class InventoryFeed:
    """Hands each policy that declares kinds its part of the inventory after every refresh,
    only when it changed (a new document means a new engine in each evaluation worker)."""

    programs: list[tuple[InventoryProgram, tuple[Gvk, ...]]]
    digests: dict[int, bytes] = field(default_factory=dict)

    @property
    def kinds(self) -> set[Gvk]:
        return {gvk for _, kinds in self.programs for gvk in kinds}

    def push(self, inventory: Inventory) -> None:
        for index, (program, kinds) in enumerate(self.programs):
            document = inventory.document(kinds)
            gap = inventory.gap(kinds)
            digest = hashlib.sha256(orjson.dumps([document, gap],
                                                 option=orjson.OPT_SORT_KEYS)).digest()
            if self.digests.get(index) != digest:
                program.use_inventory(document, gap)
                self.digests[index] = digest


def inventory_feed(policies: Iterable[Any]) -> InventoryFeed:
    """The feed for the Rego policies (compiled) that declare `rego.inventory` kinds."""
    programs: list[tuple[InventoryProgram, tuple[Gvk, ...]]] = []
    for policy in policies:
        program = getattr(policy, "rego", None)
        declared = getattr(getattr(program, "spec", None), "inventory", None)
        if program is not None and declared and hasattr(program, "use_inventory"):
            kinds = tuple(Gvk(k.group, k.version, k.kind) for k in declared)
            programs.append((program, kinds))
            # Until the first list, the policy has no inventory to judge by.
            program.use_inventory(Inventory().document(()), "the cluster cache has not been "
                                  "listed yet")
    return InventoryFeed(programs)
