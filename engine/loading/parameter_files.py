"""Policy parameters that name files (a team budgets file), read by the loading layer.

A registered check declares which of its policy's parameters it reads as a file, and of which
kind (`Check.file_parameters`). Before a policy compiles, the loader reads each such file once,
parses it into its typed value (`Budgets`), and compiles the policy with that value in the
parameter's place: the core never does I/O. The policy's own `parameters` keep the path (what
`policies show` and message templates see).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from engine.core.checks.over_budget import BUDGETS_FILE
from engine.core.conditions import file_parameters
from engine.loading.budget_files import read_budgets_file

READERS: dict[str, Callable[[str], Any]] = {BUDGETS_FILE: read_budgets_file}


class ParameterFiles:
    """Reads the files a policy's checks name, each path of each kind once per load."""

    def __init__(self) -> None:
        self._read: dict[tuple[str, str], Any] = {}

    def values(self, conditions: Iterable[Any], parameters: Mapping[str, Any]) -> dict[str, Any]:
        """The parsed content of every file parameter the conditions (YAML) declare and the
        parameters set to a path; InputError naming the file and line when one is bad."""
        kinds: dict[str, str] = {}
        for node in conditions:
            kinds.update(file_parameters(node))
        found: dict[str, Any] = {}
        for name, kind in kinds.items():
            path = parameters.get(name)
            if isinstance(path, str) and path and kind in READERS:
                found[name] = self._load(kind, path)
        return found

    def _load(self, kind: str, path: str) -> Any:
        if (kind, path) not in self._read:
            self._read[(kind, path)] = READERS[kind](path)
        return self._read[(kind, path)]
