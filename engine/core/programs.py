"""Policy programs: violations decided outside the condition language (Rego), as a plug-in.

A **policy kind** is a key of a policy entry (`rego:`) with the pydantic model that validates
its block and a compiler that turns the validated block into a **program**. The program stands
in for the `violation:` condition: per resource (`verdict`), or once per whole input document
(`reads_documents`: a Terraform plan) when the engine evaluates it through the evaluator its
package registered with `engine.core.evaluate.register_evaluator`.

The core never imports a kind. A kind's package registers itself when imported
(`register_policy_kind`); the first policy entry that names a key not registered yet imports the
package known for it (`KIND_PACKAGES`, by name, the way `remediations.enforce` finds executors),
so a reader of the core sees no dependency on Rego, and Rego depends on the core.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from engine.core.conditions import Condition

# Policy-entry key → the package that registers its kind when imported.
KIND_PACKAGES: dict[str, str] = {"rego": "engine.rego.kind"}


class Program(Protocol):
    """A compiled block of a policy kind."""

    @property
    def reads_documents(self) -> bool:
        """True when it judges whole input documents (once each), not single resources."""
        ...

    def verdict(self, parameters: Mapping[str, Any]) -> Condition:
        """The policy's `violation` for callers that test one resource."""
        ...


class PolicyKind(Protocol):
    """How a policy kind's block is validated and compiled."""

    @property
    def spec_model(self) -> type[BaseModel]: ...

    def compile(self, block: Any, *, policy_id: str, file: str, base_dir: Path | None,
                line: int | None, environ: Mapping[str, str]) -> Program:
        """`block`: an instance of `spec_model`. `environ`: the environment the entry point
        read (secrets a block names by variable, e.g. a bearer token), never `os.environ`."""
        ...


_KINDS: dict[str, PolicyKind] = {}


def register_policy_kind(key: str, kind: PolicyKind) -> None:
    _KINDS[key] = kind


def policy_kind(key: str) -> PolicyKind:
    """The kind registered for `key`, importing its package the first time it is asked for."""
    if key not in _KINDS and key in KIND_PACKAGES:
        importlib.import_module(KIND_PACKAGES[key])
    return _KINDS[key]


def policy_kinds() -> dict[str, PolicyKind]:
    """Every kind, its package imported (for the policy file's JSON Schema)."""
    return {key: policy_kind(key) for key in KIND_PACKAGES}
