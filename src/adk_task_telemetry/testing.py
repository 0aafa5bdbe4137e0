"""The supported test surface of adk_task_telemetry: for tests of this package and of
users' apps. Stable within a minor release; what it offers never needs a private
attribute of the package, so a refactor of the internals does not break the tests
that use it.

Each section is owned by one part of the package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import adk_compat as _compat

# --- compat ---


@contextlib.contextmanager
def fresh_adk_notes(installed: str | None = None) -> Iterator[None]:
    """Inside the block, the once-per-process notes about the installed google-adk
    (newer than the newest tested, an INFO record; probes decided without ADK's source,
    a WARNING) are made afresh, as if google-adk ``installed`` were installed (None:
    the real one). After it, the state before is back: a note made in the block does
    not count for the process.

    Feature probes are not re-run: ``installed`` changes only what the notes say and
    whether the "newer than tested" one is due.
    """
    with _compat.fresh_notes(installed):
        yield


# --- house ---


@contextlib.contextmanager
def configure_afresh() -> Iterator[None]:
    """Inside: ``configure_telemetry()`` behaves as if it had not run in this process
    (the next call sets up, rather than returning the earlier handle). Afterwards the
    earlier handle is the active one again. Providers a call inside installed stay
    installed: OpenTelemetry sets a global provider only once per process."""
    from . import configure

    earlier = configure.replace_active(None)
    try:
        yield
    finally:
        configure.replace_active(earlier)
