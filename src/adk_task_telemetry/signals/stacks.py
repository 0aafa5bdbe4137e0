"""Where a suspended task waits: capture (for ``code.stacktrace``) and parsing (for the CLI).

Both sides live here so that the format written into the ``orphaned_task`` event
and the reader that finds "where it is stuck" cannot drift apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import re
import site
import sys
import sysconfig
import traceback
import types
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures.thread import _WorkItem
from dataclasses import dataclass
from typing import Any

#: Frames and characters kept of a stack: the innermost ones say where it waits.
STACK_FRAMES = 12
STACK_CHARS = 4096


def _frames(task: asyncio.Task[Any]) -> Iterator[types.FrameType]:
    """The frames of a suspended task, innermost last, through async generators too."""
    aw: Any = task.get_coro()
    seen = 0
    while aw is not None and seen < 64:
        seen += 1
        frame = getattr(aw, "cr_frame", None) or getattr(aw, "ag_frame", None) or getattr(
            aw, "gi_frame", None)
        if frame is not None:
            yield frame
        nxt = (getattr(aw, "cr_await", None) or getattr(aw, "ag_await", None)
               or getattr(aw, "gi_yieldfrom", None))
        if nxt is None and frame is None:
            # async_generator_asend and friends hide their generator: find it.
            nxt = next((r for r in gc.get_referents(aw)
                        if isinstance(r, (types.AsyncGeneratorType, types.CoroutineType))), None)
        aw = nxt


def suspended_stack(task: asyncio.Task[Any]) -> str:
    """The innermost frames of ``task``, ``traceback``-formatted; "" if unavailable."""
    try:
        return _format(list(_frames(task)))
    except Exception:
        return ""


#: The frame of a pool thread that runs one submitted call (``self`` is the work item).
_WORK_ITEM_RUN = getattr(getattr(_WorkItem, "run", None), "__code__", None)


def thread_stack(work: Future[Any]) -> str:
    """Where the pool thread running ``work`` is now, innermost frames, formatted as
    ``suspended_stack``'s; "" when no thread runs it (queued, or done).

    The thread is the one whose stack holds the ThreadPoolExecutor work item of
    ``work``: read only when an orphan is reported, so that a call costs nothing.
    """
    try:
        for frame in sys._current_frames().values():
            frames: list[types.FrameType] = []
            f: types.FrameType | None = frame
            while f is not None:
                frames.append(f)
                if f.f_code is _WORK_ITEM_RUN:
                    if getattr(f.f_locals.get("self"), "future", None) is work:
                        frames.reverse()  # outermost (the work item) first
                        return _format(frames)
                    break
                f = f.f_back
        return ""
    except Exception:
        return ""


def _format(frames: list[types.FrameType]) -> str:
    frames = frames[-STACK_FRAMES:]
    summary = traceback.StackSummary.extract(((f, f.f_lineno) for f in frames),
                                             lookup_lines=True)
    return "".join(summary.format())[-STACK_CHARS:]


# --- reading a captured stack back ------------------------------------------------

_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
#: Packages that are never "where the user's code waits", wherever they are installed
#: (a site-packages dir, a source checkout): paths as they appear below an import root.
_FRAMEWORK_PACKAGES = ("google/adk/", "google/genai/", "opentelemetry/")
#: Directories third-party code is installed into (pip, distro packages).
_SITE_DIR_NAMES = ("site-packages", "dist-packages")
#: A standard library seen in a stack captured elsewhere (another interpreter or
#: machine): ``.../lib/python3.11/asyncio/tasks.py``, ``...\\Lib\\asyncio\\tasks.py``.
_FOREIGN_STDLIB_RE = re.compile(r"(?:^|/)(?:lib/(?:pypy|python)\d+(?:\.\d+)?t?|Lib)/")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str
    code: str

    def where(self) -> str:
        return f"{display_path(self.file)}:{self.line} in {self.func}"


def import_roots() -> list[str]:
    """Directories code is imported from (site-packages, the standard library, a
    source tree on sys.path), longest first."""
    roots = {os.path.abspath(p) for p in (*sys.path, *sysconfig.get_paths().values()) if p}
    return sorted((r for r in roots if os.path.isdir(r) and os.path.dirname(r) != r),
                  key=len, reverse=True)


def display_path(path: str, roots: Sequence[str] | None = None) -> str:
    """A frame's file as a reader wants it, in the terminal and the HTML report alike:
    relative to the current directory when it is below it (the user's own code), else
    from the directory it was imported from (``…/site-packages/google/adk/…``,
    ``…/python3.11/asyncio/tasks.py``): a CI machine's install prefix says nothing. The
    HTML report keeps the full path in the frame's ``title``."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = ""
    if rel and not rel.startswith("..") and not os.path.isabs(rel):
        return rel
    for root in import_roots() if roots is None else roots:
        if path.startswith(root + os.sep):
            return f"…/{os.path.basename(root)}/{path[len(root) + 1:]}"
    return path


def _slashed(path: str) -> str:
    return os.path.normpath(path).replace(os.sep, "/").replace("\\", "/")


@functools.lru_cache(maxsize=1)
def _roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(this interpreter's standard library dirs, its site-packages dirs), slashed.

    A virtualenv's ``platstdlib`` is its own ``lib/python3.X``, which holds its
    ``site-packages``: the site dirs are told apart first, so an installed tool is
    not taken for the standard library.
    """
    paths = sysconfig.get_paths()
    stdlib = {paths[k] for k in ("stdlib", "platstdlib") if paths.get(k)}
    sites = {paths[k] for k in ("purelib", "platlib") if paths.get(k)}
    with contextlib.suppress(Exception):  # site may be disabled (python -S)
        sites.update(site.getsitepackages())
    with contextlib.suppress(Exception):
        sites.add(site.getusersitepackages())
    return (tuple(_slashed(p) + "/" for p in stdlib),
            tuple(_slashed(p) + "/" for p in sites))


def _below_site_dir(path: str) -> str | None:
    """The part of ``path`` below the site-packages dir it is installed in, if any."""
    _, sites = _roots()
    for root in sites:
        if path.startswith(root):
            return path[len(root):]
    for name in _SITE_DIR_NAMES:
        marker = f"/{name}/"
        if marker in path:
            return path.rsplit(marker, 1)[1]
    return None


def is_framework_path(file: str) -> bool:
    """Whether a frame's file is the standard library, ADK, google-genai or
    OpenTelemetry rather than the user's code. Anything else installed in a
    site-packages dir (the user's own wheel, a toolkit library) is the user's."""
    if file.startswith("<"):  # <frozen ...>, <string>
        return True
    path = _slashed(file)
    installed = _below_site_dir(path)
    if installed is not None:
        return installed.startswith(_FRAMEWORK_PACKAGES)
    stdlib, _ = _roots()
    if path.startswith(stdlib) or _FOREIGN_STDLIB_RE.search(path):
        return True
    return any(f"/{p}" in f"/{path}" for p in _FRAMEWORK_PACKAGES)


def parse_frames(stacktrace: str) -> list[Frame]:
    """Frames of a ``traceback``-formatted stack, outermost first."""
    frames: list[Frame] = []
    lines = stacktrace.splitlines()
    for i, line in enumerate(lines):
        m = _FRAME_RE.match(line)
        if not m:
            continue
        code = ""
        if i + 1 < len(lines) and not _FRAME_RE.match(lines[i + 1]):
            code = lines[i + 1].strip()
        frames.append(Frame(m["file"], int(m["line"]), m["func"], code))
    return frames


def innermost_user_frame(stacktrace: str) -> Frame | None:
    """Where the task waits, in the user's own code: the innermost frame outside
    the standard library, ADK, google-genai and OpenTelemetry. Falls back to the
    innermost frame when every frame is framework code."""
    frames = parse_frames(stacktrace)
    for f in reversed(frames):
        if not is_framework_path(f.file):
            return f
    return frames[-1] if frames else None
