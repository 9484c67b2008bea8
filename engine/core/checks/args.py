"""Argument models shared by several checks.

An argument model's class name is its title in the published policy schema (`gpuwarden policies
schema`), hence the names kept from before checks had a module each.
"""

from __future__ import annotations

from engine.core.conditions import CheckArgs


class _FlagArgs(CheckArgs):
    # `{check: true}` / `{check: false}`: whether the property is expected to hold.
    expected: bool = True


FlagArgs = _FlagArgs
