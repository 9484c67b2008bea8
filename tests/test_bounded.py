"""`engine.core.bounded.remember`: every memo keyed by input is bounded the same way."""

from __future__ import annotations

from engine.core.bounded import remember


def test_a_memo_keeps_what_it_is_given_and_never_holds_more_than_its_bound() -> None:
    table: dict[int, str] = {}
    for key in range(10):
        assert remember(table, key, f"v{key}", 4) == f"v{key}"
        assert table[key] == f"v{key}"
        assert len(table) <= 4
    assert table == {8: "v8", 9: "v9"}  # full at four: it started again before 8
