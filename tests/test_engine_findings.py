"""The finding path's shortcuts give what the long way gives: an unknown finding's message is
remembered by the unknown paths as its evidence lists them, and says what the sorted set of
them and its reasons say."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core import evaluate
from engine.core.evaluate import _REASON_DETAILS, _UNKNOWN_REASONS, UNREAD_KIND, _why_unknown
from engine.core.model import Resource
from engine.core.policy import CompiledPolicy
from engine.loading.policies import load_policies

Make = Callable[..., Resource]

_PATHS = [*_UNKNOWN_REASONS, "capacity", "encrypted", "instance_type", "telemetry.peak"]
_REASON_VALUES: list[Any] = [None, "", 0, 1, True, "late", "no samples"]
_POLICY: CompiledPolicy = next(p for p in load_policies(["builtin"]) if p.id == "gpu-idle")


def _expected(resource: Resource, details: dict[str, Any]) -> str:
    """The message the long way: the unknown paths sorted once each, every reason as text."""
    unknown = tuple(sorted(set(details.get("unknown", []))))
    reasons = tuple(str(details[key]) if details.get(key) else None for key in _REASON_DETAILS)
    unread = resource.kind if "gpu" in unknown and UNREAD_KIND in resource.unknown else None
    return (f"{resource.name}: cannot decide '{_POLICY.spec.title}': "
            f"{_why_unknown(unknown, reasons, unread)}")


@settings(max_examples=300, deadline=None,  # the factory keeps no state between inputs
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=st.lists(st.sampled_from(_PATHS), max_size=5),
       reasons=st.dictionaries(st.sampled_from(_REASON_DETAILS), st.sampled_from(_REASON_VALUES)),
       unread=st.booleans(), kind=st.sampled_from(["Deployment", "NotebookServer"]),
       other=st.dictionaries(st.sampled_from(["window", "samples"]), st.just("7d")))
def test_an_unknown_message_is_what_its_paths_and_reasons_say(
        make_resource: Make, paths: list[str], reasons: dict[str, Any], unread: bool, kind: str,
        other: dict[str, Any]) -> None:
    resource = make_resource(kind=kind, unknown=frozenset({UNREAD_KIND} if unread else set()))
    details: dict[str, Any] = {**other, **reasons}
    if paths:
        details["unknown"] = paths
    assert evaluate._unknown_message(_POLICY, resource, details) == _expected(resource, details)
    assert len(evaluate._UNKNOWN_WHY) <= evaluate._MAX_UNKNOWN_WHY
