"""The supported test surface: for tests of this package and of users' apps.

Stable within a minor release: tests and benchmarks use these instead of the
package's private attributes, so that a refactor inside the package does not break
them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
