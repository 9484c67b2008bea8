"""Reading a team budgets file (loading layer, outside the core): a YAML/JSON mapping of
`team: monthly USD`, bounded like a policy file, every error naming the file and line."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from engine.core.budget import Budgets, budget_amount
from engine.core.errors import InputError
from engine.core.yamltext import line_of, load_yaml_documents
from engine.loading.files import read_bounded_text


def read_budgets_file(path: str) -> Budgets:
    """The budgets in the file at `path` (relative to the working directory)."""
    shown = str(Path(path))
    text = read_bounded_text(Path(path), shown, "budgets file")
    documents = load_yaml_documents(text, shown)
    document = documents[0] if len(documents) == 1 else None
    if not isinstance(document, Mapping):
        raise InputError("a budgets file is one mapping of team: monthly USD", file=shown)
    budgets: dict[str, float] = {}
    for team, amount in document.items():
        try:
            budgets[str(team).strip().lower()] = budget_amount(team, amount)
        except ValueError as exc:
            raise InputError(str(exc), file=shown, line=line_of(document, team)) from None
    return Budgets(budgets)
