"""`offhours`: the evaluation instant lies inside the resource's off-hours schedule."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engine.core import offhours
from engine.core.conditions import Check, CheckArgs, EvalContext, param_value, register_check
from engine.core.model import Resource
from engine.core.tristate import Tri

_MAX_REMEMBERED = 1024  # instants × schedules whose next transitions are kept


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
        self._schedules: dict[str, offhours.Schedule | None] = {}

    def schedule_for(self, resource: Resource) -> offhours.Schedule | None:
        text = resource.tags.get(self.tag) or resource.annotations.get(self.tag)
        if not text:
            return self.default
        if text not in self._schedules:  # a few schedules tag many resources: parsed once
            if len(self._schedules) > _MAX_REMEMBERED:
                self._schedules.clear()
            self._schedules[text] = _parsed(text)
        return self._schedules[text]

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        schedule = self.schedule_for(resource)
        return None if schedule is None else schedule.is_off(ctx.now)

    def _upcoming(self, schedule: offhours.Schedule, now: datetime) -> list[tuple[datetime, str]]:
        """Next "on" transitions; most resources share a schedule, so remember per instant."""
        key = (schedule.text, now)
        if key not in self._transitions:
            if len(self._transitions) > _MAX_REMEMBERED:
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


def _parsed(text: str) -> offhours.Schedule | None:
    """The schedule a tag holds; None when it is not a valid one."""
    try:
        return offhours.parse_schedule(text)
    except offhours.OffhoursError:
        return None
