"""Self-contained single-page HTML report (inline CSS), jinja2 with autoescaping on."""

from __future__ import annotations

from engine.outputs import RenderContext
from engine.outputs.markdown import build_view, group_by_resource, template_environment

HTML_TEMPLATE = "report.html.j2"


def render(ctx: RenderContext) -> str:
    """The full report as one HTML page; unlike the PR comment it is never truncated."""
    view = build_view(ctx)
    template = template_environment(autoescape=True).get_template(HTML_TEMPLATE)
    return template.render(view=view, groups=group_by_resource(view.failing))
