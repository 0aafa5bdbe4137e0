"""The google-adk ranges of README.md's seed-bug table and opening paragraph and of
docs/thread-pool.md's table are adk_compat's ``HOLDS_ON`` (adk_compat/versions.py, their
one owner), rendered by ``python tools/versions_doc.py --tables``: a committed copy that
disagrees fails here.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from .tool_modules import load_tool


def tool() -> ModuleType:
    """tools/versions_doc.py."""
    return load_tool("versions_doc")


def _blocks() -> tuple[Any, ...]:
    return (*tool().TABLES, *tool().SENTENCES)


@pytest.mark.parametrize("name", [t.name for t in _blocks()])
def test_version_table_follows_holds_on(name: str) -> None:
    table = next(t for t in _blocks() if t.name == name)
    diff = tool().stale(table)
    assert not diff, (f"{table.doc}'s {name} table disagrees with adk_compat/versions.py: "
                      "run `python tools/versions_doc.py --tables`\n" + "\n".join(diff))


@pytest.mark.parametrize(("name", "probe", "planted", "wrong_row"), [
    ("seed-bug", "background_tool_registry", "2.12 on", "| 2.12-2.13 | fixed"),
    ("thread-pool", "run_async_tool_thread_pool", "2.10 on", "| 2.10 to 2.13 | run_async"),
    ("seed-bug-releases", "background_tool_registry", "2.12 on", "**The bug that motivates it"
     "** (ADK issue 7058, fixed in google-adk 2.12)"),
])
def test_a_planted_wrong_range_fails_the_check(monkeypatch: pytest.MonkeyPatch, name: str,
                                                probe: str, planted: str,
                                                wrong_row: str) -> None:
    """versions.py saying otherwise than the committed doc: the check above would fail,
    and the table it asks for carries the planted range."""
    table = next(t for t in _blocks() if t.name == name)
    assert not tool().stale(table)
    monkeypatch.setitem(tool().HOLDS_ON, probe, planted)
    diff = tool().stale(table)
    assert any(line.startswith("+" + wrong_row) for line in diff), "\n".join(diff)


def test_every_tested_minor_has_one_row() -> None:
    """The rows' ranges cover ADK_MINORS exactly once each (none lost between rows)."""
    minors = ["{}.{}".format(*m) for m in tool().tested_minors()]
    assert minors[0] == tool().OLDEST_MINOR
    for table in tool().TABLES:
        cells = [line.split("|")[1].strip() for line in table.render().splitlines()[2:]]
        named: list[str] = []
        for cell in cells:
            for piece in cell.split(", "):
                low, _, high = piece.replace(table.sep, "\0").partition("\0")
                first = minors.index(low)
                named += minors[first:minors.index(high) + 1] if high else [low]
        assert sorted(named) == sorted(minors), table.name
