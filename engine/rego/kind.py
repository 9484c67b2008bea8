"""The `rego:` policy kind: importing this module registers it with the core.

`engine.core.programs` imports it the first time a policy entry has a `rego:` block (or the policy
file schema is asked for); it registers the block's model and compiler there, and the evaluator
of compiled Rego programs with `engine.core.evaluate`. The package's `__init__` stays empty: the
sandboxed worker (`engine.rego.worker`) imports the package and must start light.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engine.core.evaluate import register_evaluator
from engine.core.programs import register_policy_kind
from engine.rego.findings import RegoFindings
from engine.rego.policy import RegoProgram, RegoSpec, compile_rego


class RegoKind:
    """`engine.core.programs.PolicyKind` for `rego:` blocks."""

    @property
    def spec_model(self) -> type[BaseModel]:
        return RegoSpec

    def compile(self, block: Any, *, policy_id: str, file: str, base_dir: Path | None,
                line: int | None, environ: Mapping[str, str]) -> RegoProgram:
        assert isinstance(block, RegoSpec), "a rego: block is validated by RegoSpec"
        return compile_rego(block, policy_id=policy_id, file=file, base_dir=base_dir,
                            line=line, environ=environ)


register_policy_kind("rego", RegoKind())
register_evaluator(RegoProgram, RegoFindings())
