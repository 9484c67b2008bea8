"""`unencrypted`: storage is not encrypted at rest (or not with a customer-managed key)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.check_args import EncryptionArgs
from engine.core.conditions import Check, EvalContext, param_value, register_check
from engine.core.model import Resource
from engine.core.tristate import Tri


class Unencrypted(Check):
    key = "unencrypted"
    description = (
        "Storage is not encrypted at rest; with require_customer_key also when it is not "
        "encrypted with a customer-managed key (CMK/CMEK)."
    )
    Args = EncryptionArgs

    def __init__(self, args: EncryptionArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        self.require_customer_key = bool(param_value(params, args.customer_key_param, False))

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if "encrypted" in resource.unknown or resource.encrypted is None:
            return None
        if not resource.encrypted:
            return True
        if not self.require_customer_key:
            return False
        if "customer_key" in resource.unknown or resource.customer_key is None:
            return None
        return not resource.customer_key

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        if resource.encrypted is None or "encrypted" in resource.unknown:
            return {"unknown": ["encrypted"]}
        return {"encrypted": resource.encrypted, "customer_key": resource.customer_key}


register_check(Unencrypted)
