"""The bounded YAML loader with libyaml's parser (`yaml.CParser` events) and without it.

`load_yaml_documents` reads with libyaml's events when PyYAML has them and falls back to the
pure-Python loader on any problem. Each case here is loaded both ways (the C path forced off by
patching the module) and must give the same documents, lines, or the same one-line error; the
hostile ones (deep nesting that would crash libyaml's own composer, alias bombs, recursive
aliases, huge integers, control characters) must fail cleanly, as an `InputError`.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml

from engine.core import yamltext
from engine.core.errors import InputError
from engine.core.yamltext import MAX_DEPTH, line_of, load_yaml_documents

needs_libyaml = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml")


def _pure(text: str, **kwargs: Any) -> list[Any] | str:
    saved = yamltext._CLineLoader
    yamltext._CLineLoader = None
    try:
        return _load(text, **kwargs)
    finally:
        yamltext._CLineLoader = saved


def _load(text: str, **kwargs: Any) -> list[Any] | str:
    try:
        return load_yaml_documents(text, "f.yaml", **kwargs)
    except InputError as exc:
        return f"error: {exc}"


def _c_only(text: str) -> list[Any]:
    """The C path alone, errors raised as PyYAML raises them (no fallback)."""
    loader = yamltext._CLineLoader(text, max_depth=MAX_DEPTH,
                                   max_weight=yamltext.EXPANSION_FLOOR + 2 * len(text))
    return yamltext._documents(loader)


def _lines(value: Any) -> Any:
    """Every mapping's and list's line and key lines, for comparing where things came from."""
    if isinstance(value, dict):
        return (line_of(value), getattr(value, "key_lines", None),
                {k: _lines(v) for k, v in value.items()})
    if isinstance(value, list):
        return (line_of(value), [_lines(v) for v in value])
    return value


DEPLOYMENT = """\
# a comment
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, "team": ml}
  annotations:
    note: |
      two
      lines
    folded: >-
      one
      line
spec:
  replicas: 3
  template:
    spec:
      containers:
        - name: c
          image: 'nvcr.io/x:1'
          resources:
            limits: {nvidia.com/gpu: 2, memory: 32Gi}
          args: [--a, "--b", 0x1F, 1_000, 0o17, .inf, ~, yes, 2026-01-02]
      tolerations:
      - key: nvidia.com/gpu
        operator: Exists
---
base: &base {cpu: 1, url: "https://x.example/?a=1&b=2"}
derived:
  <<: *base
  gpu: 1
list: [*base, *base]
---
--- ~
---
- !!binary aGVsbG8=
- !!set {a, b}
- !!omap [a: 1, b: 2]
- "\\u00e9\\x41 \\N"
- 12345678901234567890
"""


@needs_libyaml
def test_both_parsers_give_the_same_documents_and_lines() -> None:
    fast, pure = _load(DEPLOYMENT), _pure(DEPLOYMENT)
    assert isinstance(fast, list) and len(fast) == 3
    assert _lines(fast) == _lines(pure)
    assert fast[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": 2, "memory": "32Gi"}
    assert fast[1]["derived"] == {"cpu": 1, "url": "https://x.example/?a=1&b=2", "gpu": 1}
    assert line_of(fast[0]["metadata"], "labels") == 6


@pytest.mark.parametrize("loader", ["libyaml", "pure"])
def test_documents_equal_what_safe_load_all_reads(loader: str) -> None:
    expected = [doc for doc in yaml.safe_load_all(DEPLOYMENT) if doc is not None]
    if loader == "libyaml" and not yaml.__with_libyaml__:
        pytest.skip("PyYAML without libyaml")
    assert (_load(DEPLOYMENT) if loader == "libyaml" else _pure(DEPLOYMENT)) == expected


LINE_BREAKS = {
    "CRLF": "a: 1\r\nb:\r\n  c: [1,\r\n 2]\r\n",
    "line separator in a quoted scalar": "a: 'x\u2028y'\nb:\n  c: 1\n",
    "line separator between entries": "a: x\u2028b: 2\nc:\n  d: 1\n",
    "NEL": "a: x\x85b: 1\nc: {d: 1}\n",
    "paragraph separator in a block scalar": "a: |\n  x\u2029y\nb:\n  c: 1\n",
    "BOM and astral characters": "\ufeffk: 'caf\u00e9 \U0001F600'\nb:\n - {c: 1}\n",
}


@needs_libyaml
@pytest.mark.parametrize("text", LINE_BREAKS.values(), ids=LINE_BREAKS.keys())
def test_unusual_line_breaks_give_the_same_lines(text: str) -> None:
    assert _lines(_load(text)) == _lines(_pure(text))


@needs_libyaml
def test_the_c_path_reads_without_falling_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("fell back to the pure-Python loader")

    expected = _lines(_pure(DEPLOYMENT))
    monkeypatch.setattr(yamltext, "_LineLoader", refuse)
    assert _lines(load_yaml_documents(DEPLOYMENT, "f.yaml")) == expected


def _nested(levels: int, flow: bool) -> str:
    if flow:
        return "a: " + "[" * levels + "]" * levels + "\n"
    return "".join("  " * i + "k:\n" for i in range(levels)) + "  " * levels + "v\n"


BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x, x]"]
                 + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]"
                    for i in range(8)]) + "\n"

HOSTILE = {
    "flow nesting past the bound": _nested(MAX_DEPTH + 1, flow=True),
    "block nesting past the bound": _nested(MAX_DEPTH + 1, flow=False),
    "flow nesting that crashes libyaml's composer": _nested(200_000, flow=True),
    "alias bomb": BOMB,
    "recursive alias": "a: &a [1, *a]\n",
    "undefined alias": "a: *nowhere\n",
    "huge integer": "a: " + "9" * 500 + "\n",
    "control character": "a: b\x01c\n",
    "tab indentation": "a:\n\tb: c\n",
    "unclosed flow": "a: [1, 2\n",
    "bad indentation": "a:\n  b: 1\n c: 2\n",
    "a reused anchor name": "a: &a [1]\nb: &a [*a, *a]\nc: [*a, *a, *a]\n",
    "unhashable key": "? [a, b]\n: c\n",
}


@needs_libyaml
@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_text_gives_what_the_pure_loader_gives(text: str) -> None:
    assert _load(text) == _pure(text)


@needs_libyaml
@pytest.mark.parametrize("name", ["flow nesting past the bound", "block nesting past the bound",
                                  "flow nesting that crashes libyaml's composer", "alias bomb",
                                  "recursive alias", "huge integer", "control character"])
def test_hostile_text_is_refused_on_the_c_path_itself(name: str) -> None:
    with pytest.raises((yaml.YAMLError, ValueError)):
        _c_only(HOSTILE[name])
    assert str(_load(HOSTILE[name])).startswith("error: f.yaml:")


@needs_libyaml
def test_the_c_path_counts_nodes_when_there_is_no_anchor() -> None:
    text = "[" + ", ".join(["1"] * 50) + "]\n"
    loader = yamltext._CLineLoader(text, max_depth=MAX_DEPTH, max_weight=40)
    with pytest.raises(yaml.YAMLError, match="more than 40 values"):
        yamltext._documents(loader)
    assert isinstance(_c_only(text)[0], list)


def test_the_refusals_read_as_before() -> None:
    assert "nested more than 128 levels deep" in str(_load(_nested(200_000, flow=True)))
    assert "aliases expand this document" in str(_load(BOMB))
    assert "an alias refers to a node that contains it" in str(_load("a: &a [1, *a]\n"))
    assert "an integer of more than 100 characters" in str(_load(HOSTILE["huge integer"]))


def test_deep_nesting_does_not_crash_the_process() -> None:
    """libyaml's own composer recurses in C and crashes on such a text; ours refuses it."""
    code = ("import sys; from engine.core.yamltext import load_yaml_documents\n"
            "from engine.core.errors import InputError\n"
            "try:\n    load_yaml_documents('[' * 300000 + ']' * 300000, 'f')\n"
            "except InputError as exc:\n    print(exc)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "nested more than" in result.stdout
