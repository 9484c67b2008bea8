"""`mig-capable`: the GPU model has MIG profiles in the catalog."""

from __future__ import annotations

from engine.core.catalog import Catalog
from engine.core.checks.args import FlagArgs
from engine.core.checks.catalog_memo import CatalogMemo
from engine.core.conditions import Check, EvalContext, register_check
from engine.core.model import Resource
from engine.core.tristate import Tri


def _family(catalog: Catalog, gpu: tuple[str | None, float | None]) -> str | None:
    return catalog.mig_family(*gpu)


# The MIG profile table of each GPU model and memory: `Catalog.mig_family`, without its lock
MIG_FAMILIES: CatalogMemo[tuple[str | None, float | None], str | None] = CatalogMemo(_family)


@register_check
class MigCapable(Check):
    key = "mig-capable"
    description = "The GPU model is known and has a MIG profile table in the catalog."
    Args = FlagArgs
    shorthand = "expected"

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        gpu = resource.gpu
        capable = gpu is not None \
            and MIG_FAMILIES.get(ctx.catalog, (gpu.model, gpu.memory_gib)) is not None
        return capable is bool(self.args.expected)
