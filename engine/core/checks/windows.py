"""Whether a resource's telemetry covers the look-back window a policy judges."""

from __future__ import annotations

from engine.core.durations import format_duration
from engine.core.model import Telemetry


def window_shortfall(telemetry: Telemetry, window_seconds: int) -> str | None:
    """Why the telemetry's window is too short to judge; None when it covers the window."""
    if telemetry.window_seconds >= window_seconds:
        return None
    return (f"its telemetry covers {format_duration(telemetry.window_seconds)}, less "
            f"than the policy's {format_duration(window_seconds)} window")
