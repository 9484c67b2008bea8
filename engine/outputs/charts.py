"""Charts for the HTML pages, drawn at render time as static SVG: Vega-Lite specs built with
Altair and rendered by vl-convert (the `report` extra), so a page needs no script, no network
and no CDN to show them. Without the extra, `Charts.note` says how to install it and the pages
show their tables only.

Every SVG is checked before a page embeds it: no script, no event handler, no foreign object,
no link out of the document (`checked_svg`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.outputs.breakdown import GroupMoney

if TYPE_CHECKING:
    import altair

INSTALL_HINT = ("Charts need the report extra: python3 -m pip install -e '.[report]' in a "
                "checkout (or python3 -m pip install altair vl-convert-python).")
MAX_POINTS = 200  # runs in one trend chart: the latest ones
WIDTH = 560
KIND_LABELS = {"spend_usd": "GPU spend", "savings_usd": "savings",
               "unallocated_usd": "spend with no owner", "over_budget_usd": "over budget"}
KIND_COLOURS = {"GPU spend": "#0969da", "savings": "#1a7f37", "spend with no owner": "#bf8700",
                "over budget": "#cf222e"}
STATE_COLOURS = {"new": "#cf222e", "still open": "#bf8700", "fixed": "#1a7f37"}
FORBIDDEN_ELEMENTS = frozenset({"script", "foreignobject", "iframe", "object", "embed", "image",
                                "use", "animate", "set", "a", "style"})


class UnsafeSvg(ValueError):
    """A drawn chart that a page must not embed."""


@dataclass(slots=True)
class Charts:
    """The SVG of each chart drawn, by name; `note` says why some are not."""

    svg: dict[str, str] = field(default_factory=dict)
    note: str = ""


def _altair() -> Any:
    """Altair and vl-convert, or None when the report extra is not installed."""
    try:
        import altair as alt
        import vl_convert  # noqa: F401  (Altair renders SVG through it)
    except ImportError:
        return None
    return alt


def draw(specs: Mapping[str, Any]) -> Charts:
    """Each named chart (a callable given Altair, returning a chart or None) as checked SVG."""
    alt = _altair()
    if alt is None:
        return Charts(note=INSTALL_HINT)
    import vl_convert

    charts = Charts()
    for name, build in specs.items():
        chart = build(alt)
        if chart is None:
            continue
        try:
            charts.svg[name] = checked_svg(vl_convert.vegalite_to_svg(chart.to_dict()))
        except (UnsafeSvg, ValueError, RuntimeError) as error:
            charts.note = (f"A chart could not be drawn ({type(error).__name__}); its table "
                           "is below.")
    return charts


def checked_svg(svg: str) -> str:
    """`svg` if it is one SVG element with no active content; else UnsafeSvg."""
    if "<!DOCTYPE" in svg or "<!ENTITY" in svg:
        raise UnsafeSvg("a declaration in the SVG")
    try:
        root = ElementTree.fromstring(svg)
    except ElementTree.ParseError as error:
        raise UnsafeSvg(f"not well-formed: {error}") from None
    if _local(root.tag) != "svg":
        raise UnsafeSvg("not an SVG element")
    for element in root.iter():
        if _local(element.tag).lower() in FORBIDDEN_ELEMENTS:
            raise UnsafeSvg(f"a <{_local(element.tag)}> element")
        for name, value in element.attrib.items():
            if _local(name).lower().startswith("on") or _local(name) == "href" \
                    or ("url(" in value and "url(#" not in value):
                raise UnsafeSvg(f"an attribute {_local(name)!r}")
    return svg


def _local(name: str) -> str:
    return name.rsplit("}", 1)[-1]


# ---------------------------------------------------------------------------- the charts


def money_chart(rows: Sequence[GroupMoney], dimension: str, kinds: Sequence[str]) -> Any:
    """A grouped bar chart builder: per group, one bar per kind of money (never stacked: the
    kinds do not add up)."""
    def build(alt: Any) -> altair.Chart | None:
        values = [{"group": row.group, "kind": KIND_LABELS[kind], "usd": getattr(row, kind)}
                  for row in rows for kind in kinds if getattr(row, kind) > 0]
        if not values:
            return None
        shown = [KIND_LABELS[kind] for kind in kinds]
        encoding: dict[str, Any] = {
            "y": alt.Y("group:N", title=dimension, sort=[row.group for row in rows],
                       axis=alt.Axis(labelLimit=220)),
            "x": alt.X("usd:Q", title="USD per month", axis=alt.Axis(format="$,.0f")),
            "color": _colour(alt, "kind", "figure", shown, KIND_COLOURS)}
        if len(values) > len({value["group"] for value in values}):  # bars side by side
            encoding["yOffset"] = alt.YOffset("kind:N", sort=shown)
        chart: altair.Chart = alt.Chart(alt.Data(values=values)).mark_bar().encode(
            **encoding).properties(width=WIDTH, title=f"By {dimension}")
        return chart
    return build


def money_trend_chart(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Spend, savings and spend with no owner per recorded run."""
    def build(alt: Any) -> altair.Chart | None:
        kinds = ("monthly_spend_usd", "savings_usd", "unallocated_usd")
        labels = {"monthly_spend_usd": "GPU spend", "savings_usd": "savings",
                  "unallocated_usd": "spend with no owner"}
        values = [{"at": row["at"], "kind": labels[kind], "usd": row[kind]}
                  for row in rows[-MAX_POINTS:] for kind in kinds
                  if isinstance(row.get(kind), int | float)]
        if not values:
            return None
        chart: altair.Chart = alt.Chart(alt.Data(values=values)).mark_line(point=True).encode(
            x=alt.X("at:T", title="run"),
            y=alt.Y("usd:Q", title="USD per month", axis=alt.Axis(format="$,.0f")),
            color=_colour(alt, "kind", "figure", list(labels.values()), KIND_COLOURS),
        ).properties(width=WIDTH, title="Money per run")
        return chart
    return build


def findings_trend_chart(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Failing findings per run: new since the run before, still open; and those fixed."""
    def build(alt: Any) -> altair.Chart | None:
        values = [{"run": f"#{row['run']}", "state": state, "count": _count(row[key])}
                  for row in rows[-MAX_POINTS:]
                  for key, state in (("new", "new"), ("open", "still open"), ("fixed", "fixed"))]
        if not values:
            return None
        order = [f"#{row['run']}" for row in rows[-MAX_POINTS:]]
        chart: altair.Chart = alt.Chart(alt.Data(values=values)).mark_bar().encode(
            x=alt.X("run:O", title="run", sort=order),
            xOffset=alt.XOffset("state:N", sort=list(STATE_COLOURS)),
            y=alt.Y("count:Q", title="failing findings"),
            color=_colour(alt, "state", "findings", list(STATE_COLOURS), STATE_COLOURS),
        ).properties(width=WIDTH, title="Findings per run")
        return chart
    return build


def group_trend_chart(points: Sequence[Mapping[str, Any]], measure: str, title: str,
                      axis_title: str) -> Any:
    """One line per group over the runs: `points` are {"at", "group", measure}."""
    def build(alt: Any) -> altair.Chart | None:
        values = [{"at": p["at"], "group": p["group"], "value": p[measure]} for p in points]
        if not values:
            return None
        chart: altair.Chart = alt.Chart(alt.Data(values=values)).mark_line(point=True).encode(
            x=alt.X("at:T", title="run"),
            y=alt.Y("value:Q", title=axis_title),
            color=alt.Color("group:N", title=None, legend=alt.Legend(labelLimit=220)),
        ).properties(width=WIDTH, title=title)
        return chart
    return build


def _count(value: object) -> int:
    return len(value) if isinstance(value, list) else int(value) if isinstance(value, int) else 0


def _colour(alt: Any, name: str, title: str, domain: list[str],
            colours: Mapping[str, str]) -> Any:
    return alt.Color(f"{name}:N", title=title, sort=domain,
                     scale=alt.Scale(domain=domain, range=[colours[d] for d in domain]))
