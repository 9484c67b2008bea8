"""Registered checks: the GPU-governance conditions a value filter cannot express.

Each is one small class with its arguments' schema beside it (Cloud Custodian's registry idea);
adding a check never means editing a central switch.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field

from engine import offhours
from engine.catalog import MigProfile
from engine.conditions import Check, CheckArgs, EvalContext, param_value, register_check
from engine.durations import format_duration, parse_duration
from engine.labels import is_production, missing_tags
from engine.model import Resource, Telemetry
from engine.tristate import Tri


class _FlagArgs(CheckArgs):
    expected: bool = True


@register_check
class HasGpu(Check):
    key = "has-gpu"
    description = "The resource holds GPUs (whole or MIG slices); unknown when its type is unknown."
    Args = _FlagArgs
    shorthand = "expected"

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        # Unknown: a type known only after apply, or an unreadable GPU request (no GPUs read).
        if resource.is_unknown("gpu") and not resource.has_gpu:
            return None
        return resource.has_gpu is bool(self.args.expected)

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        if resource.is_unknown("gpu") and not resource.has_gpu:
            return {"unknown": ["gpu"]}
        return {}


@register_check
class Production(Check):
    key = "production"
    description = (
        "Tag/label env or environment is prod or production (key case-insensitive); "
        "on Kubernetes the workload's labels, else its namespace's."
    )
    Args = _FlagArgs
    shorthand = "expected"

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        production = is_production(resource)
        return None if production is None else production == self.args.expected

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        return {"unknown": ["tags"]} if is_production(resource) is None else {}


class _TagsArgs(CheckArgs):
    tags: list[str] | None = None
    param: str | None = "required_tags"


@register_check
class TagsMissing(Check):
    key = "tags-missing"
    description = "Any required tag is missing or empty (case-insensitive keys, '-' and '_' equal)."
    Args = _TagsArgs
    shorthand = "tags"

    def __init__(self, args: _TagsArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        required = args.tags if args.tags is not None else param_value(params, args.param, None)
        if not isinstance(required, list) or not all(isinstance(t, str) for t in required):
            raise ValueError("required tags must be a list of strings")
        self.required: list[str] = required

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if resource.is_unknown("tags"):
            return None
        return bool(missing_tags(resource.tags, self.required))

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        if resource.is_unknown("tags"):
            return {"unknown": ["tags"]}
        return {"missing_tags": missing_tags(resource.tags, self.required)}


class _OffhoursArgs(CheckArgs):
    default_param: str = "default_schedule"
    tag_param: str = "schedule_tag"


@register_check
class OffHours(Check):
    key = "offhours"
    description = (
        "The evaluation instant lies inside the resource's off-hours: its schedule tag "
        "(Cloud Custodian offhours syntax) or the policy's default schedule."
    )
    Args = _OffhoursArgs

    def __init__(self, args: _OffhoursArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        self.default = offhours.parse_schedule(str(param_value(params, args.default_param, None)))
        self.tag = str(param_value(params, args.tag_param, None))
        self._transitions: dict[tuple[str, datetime], list[tuple[datetime, str]]] = {}

    def schedule_for(self, resource: Resource) -> offhours.Schedule | None:
        text = resource.tags.get(self.tag) or resource.annotations.get(self.tag)
        if not text:
            return self.default
        try:
            return offhours.parse_schedule(text)
        except offhours.OffhoursError:
            return None

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        schedule = self.schedule_for(resource)
        return None if schedule is None else schedule.is_off(ctx.now)

    def _upcoming(self, schedule: offhours.Schedule, now: datetime) -> list[tuple[datetime, str]]:
        """Next "on" transitions; most resources share a schedule, so remember per instant."""
        key = (schedule.text, now)
        if key not in self._transitions:
            if len(self._transitions) > 1024:
                self._transitions.clear()
            self._transitions[key] = [
                t for t in schedule.next_transitions(now, 2) if t[1] == "on"
            ]
        return self._transitions[key]

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        schedule = self.schedule_for(resource)
        if schedule is None:
            text = resource.tags.get(self.tag) or resource.annotations.get(self.tag)
            return {"schedule_error": f"its {self.tag} tag {text!r} is not a valid schedule"}
        upcoming = self._upcoming(schedule, ctx.now)
        return {
            "schedule": schedule.text,
            "off_fraction": schedule.off_fraction(),
            "back_on_at": upcoming[0][0].isoformat() if upcoming else None,
        }


class _MigArgs(CheckArgs):
    headroom_param: str = "headroom"
    max_fraction_param: str = "max_fraction"


def _memory_need_gib(resource: Resource) -> float | None:
    gpu = resource.gpu
    if gpu is None:
        return None
    return gpu.declared_memory_gib if gpu.declared_memory_gib is not None else (
        gpu.observed_peak_memory_gib
        if gpu.observed_peak_memory_gib is not None
        else (resource.telemetry.peak_memory_gib if resource.telemetry else None)
    )


@register_check
class MigFit(Check):
    key = "mig-fits"
    description = (
        "A workload holding whole MIG-capable GPUs needs (declared gpuwarden.io/gpu-memory or "
        "observed peak) no more than a MIG slice of at most max_fraction of the GPU, with headroom."
    )
    Args = _MigArgs

    def __init__(self, args: _MigArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        self.headroom = float(param_value(params, args.headroom_param, 0.2))
        self.max_fraction = float(param_value(params, args.max_fraction_param, 0.5))

    def profile(self, resource: Resource, ctx: EvalContext) -> MigProfile | None:
        need = _memory_need_gib(resource)
        family = ctx.catalog.mig_family(resource.gpu.model if resource.gpu else None,
                                        resource.gpu.memory_gib if resource.gpu else None)
        if need is None or family is None:
            return None
        return ctx.catalog.smallest_mig_fit(family, need, self.headroom, self.max_fraction)

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if _memory_need_gib(resource) is None:
            return None
        return self.profile(resource, ctx) is not None

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        need = _memory_need_gib(resource)
        if need is None:
            return {"unknown": ["gpu.declared_memory_gib", "telemetry.peak_memory_gib"]}
        profile = self.profile(resource, ctx)
        if profile is None:
            return {"memory_need_gib": need}
        return {
            "memory_need_gib": need,
            "mig_profile": profile.name,
            "mig_resource": profile.resource_name,
            "mig_compute_fraction": round(profile.compute_slices / 7, 4),
        }


@register_check
class MigCapable(Check):
    key = "mig-capable"
    description = "The GPU model is known and has a MIG profile table in the catalog."
    Args = _FlagArgs
    shorthand = "expected"

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        gpu = resource.gpu
        capable = gpu is not None and ctx.catalog.mig_family(gpu.model, gpu.memory_gib) is not None
        return capable is bool(self.args.expected)


class _ActivityArgs(CheckArgs):
    threshold_param: str = "threshold_pct"
    window_param: str | None = "window"


@register_check
class ActivityBelow(Check):
    key = "activity-below"
    description = (
        "Average GPU compute activity over the look-back window is below a threshold (percent); "
        "unknown without telemetry."
    )
    Args = _ActivityArgs

    def __init__(self, args: _ActivityArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        self.threshold = float(param_value(params, args.threshold_param, None))
        # The policy's window is the shortest look-back it judges (absent: any telemetry).
        window = params.get(args.window_param) if args.window_param else None
        self.window = 0 if window is None else parse_duration(window)

    def _undecided(self, telemetry: Telemetry | None) -> str | None:
        """Why the telemetry cannot decide ('' when there is none), None when it can."""
        if telemetry is None:
            return ""
        if telemetry.average_activity_pct is None or telemetry.samples == 0:
            return telemetry.reason or ""
        if telemetry.window_seconds < self.window:
            return (f"its telemetry covers {format_duration(telemetry.window_seconds)}, less "
                    f"than the policy's {format_duration(self.window)} window")
        return None

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        telemetry = resource.telemetry
        if telemetry is None or self._undecided(telemetry) is not None:
            return None
        assert telemetry.average_activity_pct is not None
        return telemetry.average_activity_pct < self.threshold

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        telemetry = resource.telemetry
        why = self._undecided(telemetry)
        if telemetry is None or why is not None:
            return {"unknown": ["telemetry"], **({"telemetry_reason": why} if why else {})}
        assert telemetry.average_activity_pct is not None
        return {
            "average_activity_pct": round(telemetry.average_activity_pct, 2),
            "metric": telemetry.metric,
            "samples": telemetry.samples,
            "window": str(timedelta(seconds=telemetry.window_seconds)),
            "threshold_pct": self.threshold,
        }


class _EncryptionArgs(CheckArgs):
    customer_key_param: str = Field(default="require_customer_key")


@register_check
class Unencrypted(Check):
    key = "unencrypted"
    description = (
        "Storage is not encrypted at rest; with require_customer_key also when it is not "
        "encrypted with a customer-managed key (CMK/CMEK)."
    )
    Args = _EncryptionArgs

    def __init__(self, args: _EncryptionArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        self.require_customer_key = bool(param_value(params, args.customer_key_param, False))

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if resource.is_unknown("encrypted") or resource.encrypted is None:
            return None
        if not resource.encrypted:
            return True
        if not self.require_customer_key:
            return False
        if resource.is_unknown("customer_key") or resource.customer_key is None:
            return None
        return not resource.customer_key

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        if resource.encrypted is None or resource.is_unknown("encrypted"):
            return {"unknown": ["encrypted"]}
        return {"encrypted": resource.encrypted, "customer_key": resource.customer_key}


# Guardrail checks and estimators register themselves on import (kept in their own module).
from engine import checks_guardrails as _guardrails  # noqa: E402, F401
