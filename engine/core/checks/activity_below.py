"""`activity-below`: average GPU compute activity over the look-back window is low."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from functools import lru_cache
from typing import Any

from engine.core.check_args import ActivityArgs
from engine.core.checks.windows import window_shortfall
from engine.core.conditions import Check, EvalContext, param_value, register_check
from engine.core.durations import parse_duration
from engine.core.model import Resource, Telemetry
from engine.core.tristate import Tri


class ActivityBelow(Check):
    key = "activity-below"
    description = (
        "Average GPU compute activity over the look-back window is below a threshold (percent); "
        "unknown without telemetry."
    )
    Args = ActivityArgs

    def __init__(self, args: ActivityArgs, params: Mapping[str, Any]):
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
        return window_shortfall(telemetry, self.window)

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        telemetry = resource.telemetry
        # undecided exactly when `_undecided` gives a reason, without putting it into words
        if telemetry is None or telemetry.average_activity_pct is None \
                or telemetry.samples == 0 or telemetry.window_seconds < self.window:
            return None
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
            "window": _window_text(telemetry.window_seconds),
            "threshold_pct": self.threshold,
        }


@lru_cache(maxsize=256)  # the few windows telemetry is read over; bounded for hostile ones
def _window_text(seconds: int) -> str:
    return str(timedelta(seconds=seconds))


register_check(ActivityBelow)
