"""Output formats by name. Each renderer module is imported on first use only, so a run that
prints JSON never pays for rich or jinja2."""

from __future__ import annotations

import importlib

from engine.core.errors import InputError
from engine.outputs import RenderContext, Renderer

RENDERER_MODULES: dict[str, str] = {
    "table": "engine.outputs.table",
    "json": "engine.outputs.json_report",
    "sarif": "engine.outputs.sarif",
    "junit": "engine.outputs.junit",
    "markdown": "engine.outputs.markdown",
    "html": "engine.outputs.html",
    "policyreport": "engine.outputs.policyreport",
}
FORMATS: tuple[str, ...] = tuple(RENDERER_MODULES)


def _lazy(module_name: str) -> Renderer:
    def render(ctx: RenderContext) -> str:
        renderer: Renderer = importlib.import_module(module_name).render
        return renderer(ctx)

    render.__qualname__ = f"render[{module_name}]"
    return render


RENDERERS: dict[str, Renderer] = {fmt: _lazy(module) for fmt, module in RENDERER_MODULES.items()}


def render(fmt: str, ctx: RenderContext) -> str:
    """Render `ctx` in output format `fmt`; an unknown format is an InputError."""
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        choices = ", ".join(FORMATS)
        raise InputError(f"unknown output format '{fmt}' (choose one of: {choices})")
    return renderer(ctx)
