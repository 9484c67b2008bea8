"""`mig-capable`: the GPU model has MIG profiles in the catalog."""

from __future__ import annotations

from engine.core.check_args import FlagArgs
from engine.core.conditions import Check, EvalContext, register_check
from engine.core.model import Resource
from engine.core.tristate import Tri


class MigCapable(Check):
    key = "mig-capable"
    description = "The GPU model is known and has a MIG profile table in the catalog."
    Args = FlagArgs
    shorthand = "expected"

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        gpu = resource.gpu
        capable = gpu is not None and ctx.catalog.mig_family(gpu.model, gpu.memory_gib) is not None
        return capable is bool(self.args.expected)


register_check(MigCapable)
