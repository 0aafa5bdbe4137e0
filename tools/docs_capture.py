"""`make docs`: every captured output in README.md and docs/*.md, made again by the real
command on the google-adk version it names.

A captured output is a marked block; this tool owns the marker line and the text in
between, and ``BLOCKS`` below is the one list of them (command, ADK version, what of
the output is shown)::

    <!-- docs:begin NAME: make docs runs `COMMAND` on google-adk VERSION -->
    ```text
    ...
    ```
    <!-- docs:end -->

    python tools/docs_capture.py            # rewrite the blocks whose output changed
    python tools/docs_capture.py --check    # exit 1, with a diff, if a copy is stale

A run's timings, bar lengths, ids and the third-party versions of the environment
change from run to run: copies are compared in a normalized form (``normalize``)
that masks them and keeps everything else (words, counts, outcomes, line numbers).
Without ``--force`` a block is rewritten only when that form changed, so the docs
do not churn. Commands run with ``PYTHONPATH`` set to this checkout's ``src``, in the
virtualenv ``<venvs>/adk-<version>`` (``make test`` builds them).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/*.md")
BEGIN = re.compile(r"^<!-- docs:begin (?P<name>[\w.-]+)(?::.*)? -->$")
END = "<!-- docs:end -->"
CLI = "adk-task-telemetry"


@dataclass(frozen=True)
class Capture:
    """One run of a command in a version's virtualenv."""

    adk: str
    argv: tuple[str, ...]  # argv[0]: a program of the venv's bin/ (CLI, python)
    stderr: bool = False  # merged into the output, as a terminal shows it
    in_tmp: bool = False  # run in a fresh directory (with ``files``), else in the repo
    files: tuple[tuple[str, Callable[[], str]], ...] = ()
    stub_missing: str = ""  # a module made to fail to import (ModuleNotFoundError)


@dataclass(frozen=True)
class Block:
    name: str
    doc: str  # path relative to the repository
    capture: Capture
    prompt: bool = True  # show "$ command" first
    exit_code: bool = False  # end with "$ echo $?" and the code
    select: Callable[[str], str] = field(default=lambda text: text)
    note: str = ""  # shown after the command on the prompt line ("# grpcio missing")

    @property
    def command(self) -> str:
        return shlex.join(self.capture.argv)


def _between(start: str, stop: str) -> Callable[[str], str]:
    """The lines from the first matching ``start`` up to, not including, the next
    matching ``stop`` (regular expressions)."""
    def select(text: str) -> str:
        lines = text.splitlines()
        first = next(i for i, line in enumerate(lines) if re.search(start, line))
        last = next((i for i in range(first + 1, len(lines)) if re.search(stop, lines[i])),
                    len(lines))
        return "\n".join(lines[first:last]).rstrip("\n") + "\n"
    return select


def _tail(n: int) -> Callable[[str], str]:
    return lambda text: "...\n" + "\n".join(text.splitlines()[-n:]) + "\n"


def _from_test_module(name: str) -> Callable[[], str]:
    """The inner project's helpers kept in tests/test_pytest_plugin.py (one copy)."""
    def read() -> str:
        tree = ast.parse((ROOT / "tests" / "test_pytest_plugin.py").read_text())
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == name and isinstance(node.value, ast.Constant)):
                return str(node.value.value)
        raise LookupError(f"tests/test_pytest_plugin.py has no {name}")
    return read


PYTEST_AGENT_TESTS = '''import asyncio

from leaky import live_leak


def test_ticker_leaves_its_feed_running():
    asyncio.run(live_leak([]))


def test_ticker_fails_and_leaks():
    asyncio.run(live_leak([]))
    assert 1 + 1 == 3, "its own error"
'''

FOUR = ("-s", "seed_bug", "-s", "parallel_one_fails", "-s", "recovered_error",
        "-s", "live_stop_streaming")
PYTEST_RUN = Capture(
    "2.13.0", ("python", "-m", "pytest", "-ra", "--adk-fail-on-orphans", "-p",
               "no:cacheprovider", "test_agent.py"),
    in_tmp=True, files=(("leaky.py", _from_test_module("LEAKY")),
                        ("pytest.ini", _from_test_module("INI")),
                        ("test_agent.py", lambda: PYTEST_AGENT_TESTS)))

BLOCKS: tuple[Block, ...] = (
    Block("readme-demo", "README.md",
          Capture("2.12.0", (CLI, "demo", "-s", "seed_bug"), stderr=True)),
    Block("cli-demo-2.12", "docs/cli.md", Capture("2.12.0", (CLI, "demo", *FOUR), stderr=True)),
    Block("cli-demo-2.13", "docs/cli.md", Capture("2.13.0", (CLI, "demo", "-q", *FOUR))),
    Block("cli-otlp-missing", "docs/cli.md",
          Capture("2.12.0", (CLI, "demo", "--otlp", "http://localhost:4317"), stderr=True,
                  stub_missing="grpc"),
          exit_code=True, note="# grpcio missing"),
    Block("cli-audit-2.12", "docs/cli.md", Capture("2.12.0", (CLI, "audit", "-q")),
          exit_code=True),
    Block("cli-audit-html-2.12", "docs/cli.md",
          Capture("2.12.0", (CLI, "audit", "-q", "--html", "audit-report.html"), stderr=True,
                  in_tmp=True),
          exit_code=True, select=_tail(3)),
    Block("cli-version-2.12", "docs/cli.md", Capture("2.12.0", (CLI, "version"))),
    Block("pytest-leak", "docs/pytest.md", PYTEST_RUN, prompt=False,
          select=_between(r"^_+ test_ticker_leaves_its_feed_running _+$", r"^_{3,} \w+ _{3,}$")),
    Block("pytest-fails-anyway", "docs/pytest.md", PYTEST_RUN, prompt=False,
          select=_between(r"^_+ test_ticker_fails_and_leaks _+$", r"^=+ \d+ failed")),
    Block("testing-describe", "docs/testing.md",
          Capture("2.13.0", ("python", "-c", "from tests.lifecycle_generator import "
                             "generate; print(generate(28).describe())")),
          prompt=False),
)
BY_NAME = {b.name: b for b in BLOCKS}


# --- running ---------------------------------------------------------------------------


def run(capture: Capture, bindir: Path) -> tuple[str, int]:
    """(output, exit code) of ``capture`` with the programs of ``bindir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with tempfile.TemporaryDirectory(prefix="docs-capture-") as tmp:
        paths = [str(ROOT / "src")]
        if capture.stub_missing:
            stub = Path(tmp) / "stub"
            stub.mkdir()
            missing = capture.stub_missing
            (stub / f"{missing}.py").write_text(
                f"raise ModuleNotFoundError({f'No module named {missing!r}'!r}, "
                f"name={missing!r})\n")
            paths.insert(0, str(stub))
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        # CI set, as on CI: pytest truncates its short summary lines elsewhere only.
        env.update(PYTHONPATH=os.pathsep.join(paths), COLUMNS="100", NO_COLOR="1", CI="true",
                   PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8", PYTHONDONTWRITEBYTECODE="1")
        cwd = Path(tmp) / "work" if capture.in_tmp else ROOT
        cwd.mkdir(exist_ok=True)
        for name, content in capture.files:
            (cwd / name).write_text(content())
        program = bindir / capture.argv[0]
        if not program.exists():
            raise FileNotFoundError(f"{program} not found")
        proc = subprocess.run(
            [str(program), *capture.argv[1:]], cwd=cwd, env=env, text=True, timeout=600,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT if capture.stderr else subprocess.PIPE,
            stdin=subprocess.DEVNULL)
    return proc.stdout, proc.returncode


def shown(block: Block, output: str, code: int) -> str:
    """What the block shows for one run's output."""
    lines = []
    if block.prompt:
        lines.append(f"$ {block.command}" + (f"     {block.note}" if block.note else ""))
    body = block.select(output).rstrip("\n")
    if body:
        lines.append(body)
    if block.exit_code:
        lines += ["$ echo $?", str(code)]
    return "\n".join(lines) + "\n"


def produce(blocks: Sequence[Block], bindir_for: Callable[[str], Path]) -> dict[str, str]:
    """Every block's fresh text; one run per distinct capture."""
    runs: dict[Capture, tuple[str, int]] = {}
    out = {}
    for block in blocks:
        if block.capture not in runs:
            runs[block.capture] = run(block.capture, bindir_for(block.capture.adk))
        out[block.name] = shown(block, *runs[block.capture])
    return out


# --- the documents ---------------------------------------------------------------------


def marker(block: Block) -> str:
    return (f"<!-- docs:begin {block.name}: make docs runs `{block.command}` on google-adk "
            f"{block.capture.adk} -->")


@dataclass
class Found:
    doc: Path
    begin: int  # index of the marker line
    end: int  # index of the end line
    marker: str
    text: str  # what the fenced block holds


def documents() -> list[Path]:
    return sorted({p for pattern in DOCS for p in ROOT.glob(pattern)})


def find(doc: Path) -> Iterator[tuple[str, Found]]:
    lines = doc.read_text().splitlines()
    for i, line in enumerate(lines):
        m = BEGIN.match(line)
        if not m:
            continue
        j = next((k for k in range(i + 1, len(lines)) if lines[k] == END), None)
        if j is None or j < i + 3 or not lines[i + 1].startswith("```") or lines[j - 1] != "```":
            raise ValueError(f"{doc.relative_to(ROOT)}:{i + 1}: block {m['name']} is not a "
                             f"fenced block followed by {END}")
        yield m["name"], Found(doc, i, j, line, "\n".join(lines[i + 2:j - 1]) + "\n")


def committed() -> dict[str, Found]:
    """Every marked block of README.md and docs/*.md, by name."""
    out: dict[str, Found] = {}
    for doc in documents():
        for name, found in find(doc):
            if name in out:
                raise ValueError(f"block {name} appears twice")
            out[name] = found
    return out


# --- comparing -------------------------------------------------------------------------

_MASKS: tuple[tuple[str, str], ...] = (
    (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<id>"),
    (r"\bTask-\d+\b", "Task-<n>"),
    (r"\b\d+(?:\.\d+)?\s?(?:ms|us|µs|s)\b", "<time>"),
    # A bar's length is timing; so is whether it is a bar at all: a task shorter than
    # one column is drawn as a tick (terminal.py), on a loaded machine now and then.
    (r"[━┃]+", "━"),
    (r"┄+▶", "┄▶"),
    # Where a log record of ours was emitted: the line moves with every edit of that file.
    (r"\b(adk_task_telemetry[\w.]*:\w+\.py):\d+\b", r"\1:<line>"),
    # Versions that belong to the environment, not to this code.
    (r"^(opentelemetry-(?:api|sdk)\s+)\S+", r"\1<version>"),
    (r"^(python\s+)\d+\.\d+\.\d+", r"\1<version>"),
    (r"[ \t]+", " "),
)


def normalize(text: str) -> list[str]:
    """The lines of ``text`` without what changes from run to run."""
    out = []
    for line in text.splitlines():
        for pattern, repl in _MASKS:
            line = re.sub(pattern, repl, line)
        out.append(line.strip())
    while out and not out[-1]:
        out.pop()
    return out


def differences(old: str, new: str) -> list[str]:
    """A diff of the normalized forms; empty when ``old`` is current."""
    return list(difflib.unified_diff(normalize(old), normalize(new), "committed", "fresh",
                                     lineterm="", n=1))


# --- command line ----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/docs_capture.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 if a committed copy is stale")
    ap.add_argument("--force", action="store_true", help="rewrite every block")
    ap.add_argument("--venvs", type=Path, default=ROOT / ".venvs",
                    help="directory of the adk-<version> virtualenvs (default .venvs)")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=sorted(BY_NAME),
                    help="these blocks only")
    args = ap.parse_args(argv)
    blocks = [BY_NAME[n] for n in args.only] if args.only else list(BLOCKS)
    found = committed()
    problems = [f"{f.doc.relative_to(ROOT)}:{f.begin + 1}: unknown block {name} "
                f"(tools/docs_capture.py BLOCKS)" for name, f in found.items()
                if name not in BY_NAME]
    problems += [f"{b.doc}: block {b.name} is missing (add its markers, then make docs)"
                 for b in blocks if b.name not in found]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1

    def bindir(adk: str) -> Path:
        path: Path = args.venvs.resolve() / f"adk-{adk}" / "bin"
        if not path.is_dir():
            raise SystemExit(f"docs_capture: {path} missing (make venvs builds it)")
        return path

    fresh = produce(blocks, bindir)
    stale = 0
    edits: dict[Path, list[str]] = {}
    for block in blocks:
        f = found[block.name]
        diff = differences(f.text, fresh[block.name])
        if f.marker != marker(block):
            diff = [f"-{f.marker}", f"+{marker(block)}", *diff]
        if not diff and not args.force:
            continue
        stale += 1
        where = f"{f.doc.relative_to(ROOT)}:{f.begin + 1}"
        if args.check:
            print(f"{where}: block {block.name} is stale (`{block.command}` on google-adk "
                  f"{block.capture.adk}); `make docs` rewrites it:", *diff, "", sep="\n")
            continue
        lines = edits.setdefault(f.doc, f.doc.read_text().splitlines())
        fence = lines[f.begin + 1]
        new = [marker(block), fence, *fresh[block.name].rstrip("\n").split("\n"), "```"]
        lines[f.begin:f.end] = new
        # Later blocks of the same document move with this one.
        delta = len(new) - (f.end - f.begin)
        for other in found.values():
            if other.doc == f.doc and other.begin > f.begin:
                other.begin += delta
                other.end += delta
        print(f"{where}: block {block.name} rewritten")
    for doc, lines in edits.items():
        doc.write_text("\n".join(lines) + "\n")
    if args.check:
        print(f"{len(blocks) - stale} of {len(blocks)} captured outputs current"
              + (f"; {stale} stale" if stale else ""))
        return 1 if stale else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
