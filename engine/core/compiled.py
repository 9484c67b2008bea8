"""Whether this installation runs the compiled core (docs/compiled-core.md).

The core's modules can be compiled to C extensions with mypyc; Python imports an extension in
place of the source beside it. Nothing else changes: the same code, the same results.
"""

from __future__ import annotations

import sys
from importlib.machinery import EXTENSION_SUFFIXES

# One module that is always compiled when the core is: the evaluation loop.
_PROBE = "engine.core.evaluate"


def compiled_modules() -> list[str]:
    """The core's modules imported so far that are compiled extensions, by name."""
    return sorted(name for name, module in list(sys.modules.items())
                  if name.startswith("engine.core.") and _is_extension(module))


def core_is_compiled() -> bool:
    """True when the evaluation loop runs compiled (importing it if needed)."""
    __import__(_PROBE)
    return _is_extension(sys.modules[_PROBE])


def core_kind() -> str:
    """`compiled` or `pure Python`, as `gpuwarden --version` and the benchmarks say it."""
    return "compiled" if core_is_compiled() else "pure Python"


def _is_extension(module: object) -> bool:
    path = getattr(module, "__file__", None) or ""
    return path.endswith(tuple(EXTENSION_SUFFIXES))
