"""The argument models of the built-in checks (`{<check>: <args>}` in a policy file).

They are pydantic models, and they stay Python when the core is compiled: mypyc does not keep a
compiled class's field annotations, which pydantic reads (docs/compiled-core.md). Each check
names its model as `Args`. A model's class name is its title in the published policy schema
(`gpuwarden policies schema`), hence the names kept from before checks had a module each.
"""

from __future__ import annotations

from pydantic import BaseModel


class CheckArgs(BaseModel):
    """Arguments of a registered check; subclasses declare fields (their JSON Schema is public)."""

    model_config = {"extra": "forbid"}


class _FlagArgs(CheckArgs):
    # `{check: true}` / `{check: false}`: whether the property is expected to hold.
    expected: bool = True


class _TagsArgs(CheckArgs):
    tags: list[str] | None = None
    param: str | None = "required_tags"
    billing: bool = False  # only tags billing sees count (cost allocation)


class _OffhoursArgs(CheckArgs):
    default_param: str = "default_schedule"
    tag_param: str = "schedule_tag"


class _MigArgs(CheckArgs):
    headroom_param: str = "headroom"
    max_fraction_param: str = "max_fraction"


class _ActivityArgs(CheckArgs):
    threshold_param: str = "threshold_pct"
    window_param: str | None = "window"


class _EncryptionArgs(CheckArgs):
    customer_key_param: str = "require_customer_key"


class _NamespaceArgs(CheckArgs):
    label: str
    value: str
    namespaces_param: str | None = "namespaces"


class _CheckpointArgs(CheckArgs):
    paths_param: str = "checkpoint_paths"


class _RightSizeArgs(CheckArgs):
    window_param: str = "window"
    threshold_param: str = "memory_threshold_pct"
    busy_param: str = "legacy_busy_pct"


class _BudgetArgs(CheckArgs):
    budgets_param: str = "budgets"
    file_param: str = "budgets_file"


FlagArgs = _FlagArgs
TagsArgs = _TagsArgs
OffhoursArgs = _OffhoursArgs
MigArgs = _MigArgs
ActivityArgs = _ActivityArgs
EncryptionArgs = _EncryptionArgs
NamespaceArgs = _NamespaceArgs
CheckpointArgs = _CheckpointArgs
RightSizeArgs = _RightSizeArgs
BudgetArgs = _BudgetArgs
