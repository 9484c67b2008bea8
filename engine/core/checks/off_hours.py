"""`offhours`: the evaluation instant lies inside the resource's off-hours schedule."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.core import offhours
from engine.core.bounded import remember
from engine.core.check_args import OffhoursArgs
from engine.core.conditions import Check, EvalContext, param_value, register_check
from engine.core.model import Resource
from engine.core.tristate import Tri

# Answers kept per evaluation instant: a few schedules tag a whole estate. Bounded in number,
# and only schedules of a sane length are kept (tag values are user input).
_MAX_REMEMBERED = 1024
_MAX_REMEMBERED_CHARS = 256


@dataclass(frozen=True, slots=True)
class _Answer:
    """What one schedule says at one instant: the verdict and the evidence of a finding."""

    off: Tri
    evidence: Mapping[str, Any]


class OffHours(Check):
    key = "offhours"
    description = (
        "The evaluation instant lies inside the resource's off-hours: its schedule tag "
        "(Cloud Custodian offhours syntax) or the policy's default schedule."
    )
    Args = OffhoursArgs

    def __init__(self, args: OffhoursArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        self.default = offhours.parse_schedule(str(param_value(params, args.default_param, None)))
        self.tag = str(param_value(params, args.tag_param, None))
        # The instant answered for and the answers by schedule text ("" for the default),
        # swapped as one so that an evaluation at another instant never reads them.
        self._answers: tuple[datetime | None, dict[str, _Answer]] = (None, {})

    def schedule_text(self, resource: Resource) -> str:
        """The resource's schedule tag (or annotation); "" when it has none."""
        return resource.tags.get(self.tag) or resource.annotations.get(self.tag) or ""

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        return self._answer(self.schedule_text(resource), ctx.now).off

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        return dict(self._answer(self.schedule_text(resource), ctx.now).evidence)

    def _answer(self, text: str, now: datetime) -> _Answer:
        """`_answer_at`, remembered per instant and schedule text."""
        answered_at, answers = self._answers
        if answered_at is not now:  # the same instant object throughout an evaluation
            answers = {}
            self._answers = (now, answers)
        answer = answers.get(text)
        if answer is None:
            answer = self._answer_at(text, now)
            if len(text) <= _MAX_REMEMBERED_CHARS:
                remember(answers, text, answer, _MAX_REMEMBERED)
        return answer

    def _answer_at(self, text: str, now: datetime) -> _Answer:
        schedule = self._schedule(text)
        if schedule is None:
            error = f"its {self.tag} tag {text!r} is not a valid schedule"
            return _Answer(None, {"schedule_error": error})
        upcoming = [t for t in schedule.next_transitions(now, 2) if t[1] == "on"]
        return _Answer(schedule.is_off(now), {
            "schedule": schedule.text,
            "off_fraction": schedule.off_fraction(),
            "back_on_at": upcoming[0][0].isoformat() if upcoming else None,
        })

    def _schedule(self, text: str) -> offhours.Schedule | None:
        """The schedule a text names (the default for ""); None when it is not a valid one."""
        return _parsed(text) if text else self.default


def _parsed(text: str) -> offhours.Schedule | None:
    """The schedule a tag holds; None when it is not a valid one."""
    try:
        return offhours.parse_schedule(text)
    except offhours.OffhoursError:
        return None


register_check(OffHours)
