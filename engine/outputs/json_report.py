"""The versioned JSON report (`gpuwarden.report/v1`), exactly the Report model's JSON form."""

from __future__ import annotations

import orjson

from engine.outputs import RenderContext


def render(ctx: RenderContext) -> str:
    payload = ctx.report.to_json_dict()
    data: bytes = orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    return data.decode("utf-8") + "\n"
