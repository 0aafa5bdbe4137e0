"""docs/architecture.md's layer diagram is drawn from the code's own imports, so it
cannot drift: this test draws it again and compares. ``python -m tests.test_architecture``
rewrites the block.

The layers are tests/test_layers.py's ``LAYERS`` (the test that holds every import to
them); each layer's line lists its modules and the layers below it that it actually
imports, read with the same ``ast`` reader (package ``__init__``s followed).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from .test_layers import _LEVEL, LAYERS, SRC, _name, imports_of

PAGE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
BEGIN = "<!-- layers:begin (tests/test_architecture.py draws this block) -->"
END = "<!-- layers:end -->"


def _shown(modules: tuple[str, ...]) -> list[str]:
    """A layer's modules as paths under src/adk_task_telemetry/: a folder whose modules
    are all in the layer as the folder, the others one by one."""
    everywhere = {_name(p) for p in SRC.rglob("*.py")}
    shown = set()
    for module in modules:
        folder = module.split(".")[0]
        if (SRC / folder).is_dir() and module and all(
                m in modules for m in everywhere if m.split(".")[0] == folder):
            shown.add(folder + "/")
        elif module and (SRC / folder).is_dir() and module == folder:
            shown.add(folder + "/__init__.py")
        else:
            shown.add((module.replace(".", "/") or "__init__") + ".py")
    return sorted(shown)


def draw() -> str:
    """The block: the layers top first, each with its modules and what it imports."""
    uses: dict[int, set[int]] = {i: set() for i in range(len(LAYERS))}
    for path in SRC.rglob("*.py"):
        me = _name(path)
        for dep in imports_of(path):
            if dep in _LEVEL and _LEVEL[dep] != _LEVEL[me]:
                uses[_LEVEL[me]].add(_LEVEL[dep])
    lines = ["```"]
    for i in reversed(range(len(LAYERS))):
        name, modules = LAYERS[i]
        lines.extend(textwrap.wrap(" ".join(_shown(modules)), 90, initial_indent=f"{name:<15}",
                                   subsequent_indent=" " * 15, break_on_hyphens=False))
        below = ", ".join(LAYERS[j][0] for j in sorted(uses[i], reverse=True))
        lines.append(f"{'':<14}   imports: {below or 'nothing of ours'}")
        if i:
            lines.append(f"{'':<14}   |")
    lines.append("```")
    return "\n".join(lines)


def _page_block() -> str:
    text = PAGE.read_text()
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n")


def test_the_page_draws_the_layers_the_imports_make() -> None:
    fresh = draw()
    assert _page_block() == fresh, (
        "docs/architecture.md's layer diagram is stale: run `python -m tests.test_architecture`"
        f" (or paste):\n{fresh}")


def test_every_layer_is_named_on_the_page() -> None:
    text = PAGE.read_text()
    prose = text[:text.index(BEGIN)] + text[text.index(END):]
    missing = [name for name, _ in LAYERS if f"**{name}**" not in prose]
    assert not missing, f"docs/architecture.md says nothing of the layers {missing}"


def test_the_drawing_changes_with_an_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drawing can fail: an extra import the code makes shows in it."""
    import tests.test_layers as layers

    real = layers.imports_of

    def one_more(path: Path, name: str | None = None, src: Path = SRC) -> set[str]:
        found = real(path, name, src)
        return found | {"configure"} if _name(path) == "signals.metrics" else found

    monkeypatch.setattr(sys.modules[__name__], "imports_of", one_more)
    line = next(i for i, text in enumerate(draw().splitlines()) if text.startswith("signals "))
    assert "imports: configure" in draw().splitlines()[line + 1]


if __name__ == "__main__":
    text = PAGE.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    PAGE.write_text(text[:start] + "\n" + draw() + "\n" + text[end:])
