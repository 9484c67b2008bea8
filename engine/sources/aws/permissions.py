"""IAM actions declared next to the code that calls them.

Each reader, discovery step and remediation declares the IAM actions its AWS calls need, so the
least-privilege policy of the Terraform module can be checked against the code rather than kept
by hand beside it (tests/test_iam_permissions.py):

- `reads`: Describe/List/Get actions, granted to every scanning role, dry-run included;
- `writes`: mutating actions, granted only with enforcement on and only for the remediation
  (`stop`, `snapshot-before-stop`, `mark-violation`) named beside them, restricted to the tag
  keys in `tag_keys` when they write tags;
- `assumes`: role assumption, granted to the function's own role on the listed roles only;
- `ungated`: actions IAM cannot deny (`sts:GetCallerIdentity`), so nothing grants them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

_ACTION = re.compile(r"^[a-z0-9-]+:[A-Z][A-Za-z0-9]+$")
F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True, slots=True)
class IamGrant:
    """The IAM actions one piece of code (`where`) calls."""

    where: str
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    remediation: str | None = None
    tag_keys: frozenset[str] = frozenset()
    assumes: frozenset[str] = frozenset()
    ungated: frozenset[str] = frozenset()


def iam_actions(names: Iterable[str]) -> frozenset[str]:
    """`names` as a set of IAM actions, each checked to read `service:Action`."""
    found = frozenset(names)
    malformed = sorted(name for name in found if not _ACTION.match(name))
    if malformed:
        raise ValueError(f"not IAM actions (service:Action): {malformed}")
    return found


class IamDeclarations:
    """A module's declared grants; `declare(...)` decorates the function that makes the calls."""

    def __init__(self) -> None:
        self.grants: list[IamGrant] = []

    def declare(self, *, reads: Iterable[str] = (), writes: Iterable[str] = (),
                remediation: str | None = None, tag_keys: Iterable[str] = (),
                assumes: Iterable[str] = (), ungated: Iterable[str] = ()) -> Callable[[F], F]:
        grant_writes = iam_actions(writes)
        if bool(grant_writes) != (remediation is not None):
            raise ValueError("mutating actions are declared with the remediation that needs them")

        def register(function: F) -> F:
            self.grants.append(IamGrant(
                where=getattr(function, "__qualname__", repr(function)), reads=iam_actions(reads),
                writes=grant_writes, remediation=remediation, tag_keys=frozenset(tag_keys),
                assumes=iam_actions(assumes), ungated=iam_actions(ungated)))
            return function

        return register

    def reads(self) -> frozenset[str]:
        return frozenset(action for grant in self.grants for action in grant.reads)

    def writes(self) -> list[IamGrant]:
        return [grant for grant in self.grants if grant.writes]

    def assumes(self) -> frozenset[str]:
        return frozenset(action for grant in self.grants for action in grant.assumes)

    def ungated(self) -> frozenset[str]:
        return frozenset(action for grant in self.grants for action in grant.ungated)
