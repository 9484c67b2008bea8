"""Loading policies from files: the built-in pack or paths, read within bounds, parsed and
compiled by the core (`engine.core.policy`), overrides applied in order.

The core never reads a file: this layer reads policy files and the files their parameters name
(`engine.loading.parameter_files`), and hands the core text and typed values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from engine.core.errors import InputError
from engine.core.policy import (
    BUILTIN,
    CompiledPolicy,
    PolicyOverride,
    PolicySpec,
    compile_policy,
    overridden_spec,
    parse_policy_file,
)
from engine.core.yamltext import line_of, load_yaml_documents
from engine.loading.files import read_bounded_text
from engine.loading.parameter_files import ParameterFiles

POLICY_API_VERSION = "gpuwarden.io/v1"
_TOP_LEVEL_KIND = re.compile(r"^kind[ \t]*:", re.MULTILINE)
_GATEKEEPER_GROUPS = ("templates.gatekeeper.sh/", "constraints.gatekeeper.sh/")


def builtin_pack_dir() -> Path:
    """The built-in pack: shipped inside the wheel, or `policies/` of a source checkout."""
    shipped = Path(str(resources.files("engine"))) / "builtin_policies"
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[2] / "policies"


def is_policy_file(path: Path) -> bool:
    """In a policy directory: YAML files, except `*_test.yaml` (test cases for `gpuwarden
    policies test`) and files of Kubernetes objects (test inputs kept beside the policies)."""
    return (path.suffix in (".yaml", ".yml") and not path.stem.endswith("_test")
            and not _holds_only_objects(path))


def _holds_only_objects(path: Path) -> bool:
    """True when every document has a `kind` and an `apiVersion` other than gpuwarden's (a
    Pod, an AdmissionReview): never a policy file. Anything unreadable is left to the loader."""
    try:
        text = read_bounded_text(path, str(path), "policy file")
        if not _TOP_LEVEL_KIND.search(text):  # policy files never have one: no second parse
            return False
        documents = load_yaml_documents(text, str(path))
    except InputError:
        return False
    return bool(documents) and all(_is_object(d) for d in documents)


def _is_object(document: Any) -> bool:
    # Gatekeeper templates and constraints are not test inputs: the loader's error names them.
    return (isinstance(document, Mapping) and "kind" in document
            and isinstance(document.get("apiVersion"), str)
            and document["apiVersion"] != POLICY_API_VERSION
            and not document["apiVersion"].startswith(_GATEKEEPER_GROUPS))


def _policy_files(path: str) -> list[Path]:
    target = builtin_pack_dir() if path == BUILTIN else Path(path)
    if target.is_dir():
        # The built-in pack is its top level; policies/rego/ holds the Rego examples (opt-in).
        found = target.glob("*") if path == BUILTIN else target.rglob("*")
        files = sorted(p for p in found if is_policy_file(p))
        if not files:
            raise InputError("no policy files (*.yaml) in this directory", file=str(target))
        return files
    if not target.exists():
        raise InputError("no such policy file or directory", file=str(target))
    return [target]


def _apply_override(policy: CompiledPolicy, override: PolicyOverride, file: str,
                    files: ParameterFiles) -> CompiledPolicy:
    spec = overridden_spec(policy.spec, override, file)
    return compile_policy(spec, policy.file, policy.raw, base_dir=policy.base_dir,
                          rego=policy.rego, files=_files_of(spec, policy.raw, files))


def _files_of(spec: PolicySpec, raw: Any, files: ParameterFiles) -> dict[str, Any]:
    """The files the policy's checks read (a budgets file), read here, not while compiling."""
    raw = raw if isinstance(raw, Mapping) else {}
    conditions = [raw.get(key, getattr(spec, key)) for key in ("scope", "violation")]
    return files.values(conditions, spec.parameters)


def load_policies(paths: Iterable[str], *,
                  environ: Mapping[str, str] | None = None) -> list[CompiledPolicy]:
    """Load, validate and compile policy files in order; later overrides apply to earlier ids.
    `environ`: where `token_env` variables are looked up (default: this process's)."""
    environ = os.environ if environ is None else environ
    compiled: dict[str, CompiledPolicy] = {}
    files = ParameterFiles()
    for path in paths:
        for file in _policy_files(path):
            shown = str(file) if path != BUILTIN else f"builtin:{file.name}"
            text = read_bounded_text(file, shown, "policy file")
            parsed = parse_policy_file(text, shown)
            for spec, raw in parsed.policies:
                if spec.id in compiled and compiled[spec.id].file == shown:
                    raise InputError(f"duplicate policy id {spec.id!r}", file=shown,
                                     line=line_of(raw))
                compiled[spec.id] = compile_policy(spec, shown, raw, base_dir=file.parent,
                                                   files=_files_of(spec, raw, files),
                                                   environ=environ)
            for policy_id, override in parsed.overrides.items():
                if policy_id not in compiled:
                    raise InputError(f"override of unknown policy {policy_id!r}", file=shown)
                if override.disabled:
                    del compiled[policy_id]
                else:
                    compiled[policy_id] = _apply_override(compiled[policy_id], override, shown,
                                                          files)
    return list(compiled.values())
