"""Wiring shared by the entry points: policies + catalog → engine, report → output, exit code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from engine import __version__
from engine.catalog import Catalog, builtin_catalog, with_price_overrides
from engine.errors import InputError, printable
from engine.evaluate import Engine
from engine.model import Report, Severity
from engine.outputs import PolicyMeta, RenderContext
from engine.policy import BUILTIN, CompiledPolicy, load_policies

if TYPE_CHECKING:
    from engine.sources.registry import Collected, ScanOptions

UnknownMode = Literal["warn", "fail", "pass"]
DOCS_URL = "https://github.com/gpuwarden/gpuwarden/blob/main/docs/policies.md"


def parse_instant(text: str | None) -> datetime:
    """`--now`: an ISO 8601 instant (a naive one is UTC); default the current time."""
    if text is None:
        return datetime.now(UTC)
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(f"--now: not an ISO 8601 instant: {printable(text)!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def load_catalog(prices: Path | None) -> Catalog:
    base = builtin_catalog()
    return with_price_overrides(base, prices) if prices else base


def build_engine(policy_paths: Sequence[str] | None, prices: Path | None = None) -> Engine:
    return Engine(load_policies(policy_paths or [BUILTIN]), load_catalog(prices))


def policy_meta(policies: Sequence[CompiledPolicy]) -> dict[str, PolicyMeta]:
    return {
        p.id: PolicyMeta(
            id=p.id,
            title=p.spec.title,
            description=" ".join(p.spec.description.split()),
            severity=p.spec.severity.value,
            help=" ".join(p.spec.help.split()),
            help_uri=f"{DOCS_URL}#{p.id}",
        )
        for p in policies
    }


def render_context(report: Report, engine: Engine, source_file: str | None = None,
                   width: int | None = None) -> RenderContext:
    return RenderContext(
        report=report,
        policies=policy_meta(engine.policies),
        source_file=source_file,
        tool_version=__version__,
        width=width,
    )


def render_report(
    report: Report, fmt: str, engine: Engine, source_file: str | None = None,
    width: int | None = None,
) -> str:
    from engine.outputs.registry import render

    return render(fmt, render_context(report, engine, source_file, width))


def collect_scan(specs: Sequence[str], options: ScanOptions, catalog: Catalog, instant: datetime,
                 *, show_progress: bool = False) -> Collected:
    """Read the sources and join GPU telemetry; with `show_progress`, a live read that takes
    a while shows a spinner on a terminal's stderr."""
    from engine.console import progress
    from engine.sources.registry import collect_sources

    live = [spec.partition(":")[0] for spec in specs if not spec.startswith("snapshot")]
    live += ["GPU telemetry"] if options.wants_telemetry else []
    with progress(f"reading {', '.join(live)}…", enabled=show_progress and bool(live)):
        collected = collect_sources(list(specs), options, catalog)
        if options.wants_telemetry or "telemetry" in collected.snapshot:
            from engine.telemetry import attach_telemetry

            collected = attach_telemetry(collected, options, instant, catalog)
    return collected


def apply_unknown_mode(report: Report, mode: UnknownMode) -> Report:
    """`--unknown pass` drops unknown verdicts; `warn` (default) lists them without gating."""
    if mode != "pass":
        return report
    from engine.evaluate import summarize

    kept = [f for f in report.findings if f.result != "unknown"]
    summary = summarize(kept, report.summary.resources, report.summary.passed,
                        report.summary.exempted)
    return report.model_copy(update={"findings": kept, "summary": summary})


@dataclass(frozen=True, slots=True)
class Gate:
    fail_on: Severity = Severity.INFO
    unknown: UnknownMode = "warn"
    soft_fail: bool = False

    def exit_code(self, report: Report) -> int:
        """1 when a finding whose enforcement is `deny` fails at or above `fail_on`."""
        if self.soft_fail:
            return 0
        gating = ("fail", "unknown") if self.unknown == "fail" else ("fail",)
        for finding in report.findings:
            if (
                finding.result in gating
                and finding.enforcement == "deny"
                and finding.severity.rank >= self.fail_on.rank
            ):
                return 1
        return 0
