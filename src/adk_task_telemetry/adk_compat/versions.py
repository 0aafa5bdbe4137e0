"""Version facts: the installed google-adk, the releases tested, and on which releases
each feature probe holds. The one owner of every google-adk version range the package
states; other modules refer to these names instead of repeating the numbers, and the
docs' version tables are rendered from ``HOLDS_ON`` by tools/versions_doc.py
(docs/versions.md by ``make matrix``; README.md's seed-bug table and
docs/thread-pool.md's by ``--tables``, held equal by tests/test_docs_versions.py).

No behaviour depends on the version number: the probes (``probes.py``) detect each
difference by feature. The version is read for display, for the note about an ADK
newer than the newest tested, and for the answer of a probe that cannot read ADK's
source (``KNOWN_FACTS``, derived from ``HOLDS_ON``).

Imports nothing of the package: the bottom of ``adk_compat``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version

Release = tuple[int, int, int]


def parse_version(v: str) -> Release:
    """``(major, minor, micro)`` of a version string (``2.13.0rc1`` -> (2, 13, 0));
    missing or non-numeric parts read 0, never an exception."""
    parts = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in v.split(".")[:3]]
    major, minor, micro = [*parts, 0, 0, 0][:3]
    return major, minor, micro


try:
    ADK_VERSION_STRING = version("google-adk")
except PackageNotFoundError:  # pragma: no cover - ADK is a dependency
    ADK_VERSION_STRING = "0.0.0"
#: For display, the "newer than tested" note, and the answer of a probe that cannot
#: read ADK's source (KNOWN_FACTS); no other behaviour depends on it.
ADK_VERSION = parse_version(ADK_VERSION_STRING)

#: The newest google-adk release this package was tested on (the Makefile's
#: ADK_NEWEST; tests/test_adk_compat.py holds the two equal).
NEWEST_TESTED_ADK = "2.13.0"
#: The oldest release supported, the first with ``App`` (pyproject.toml's lower bound;
#: tests/test_adk_compat.py holds the two equal).
OLDEST_SUPPORTED_ADK = "1.14.0"
#: The release that fixed ADK issue 7058 (the seed bug: background tools kept per
#: call id, the probe ``background_tool_registry``).
ISSUE_7058_FIXED_IN = "2.13.0"

#: On which google-adk minors each probe of ``probes.features()`` holds, bisected on the
#: latest patch of every minor since OLDEST_SUPPORTED_ADK (``make matrix``;
#: tests/test_adk_compat.py checks each against the installed release). A range is
#: ``"A to B"`` (both minors included), ``"A on"`` or one minor ``"A"``; several are
#: joined by ``", "``. docs/versions.md (*Where each behaviour holds*), README.md's
#: seed-bug table and docs/thread-pool.md's table are generated from this table.
HOLDS_ON: dict[str, str] = {
    "live_send_loop_polls": "1.14 to 1.21",
    "live_tool_hook": "1.14 to 1.26",
    "live_run_end_hook": "1.14 to 1.39, 2.0 to 2.7",
    "agent_tool_keeps_app_name": "1.17 on",
    "runner_closes_plugins": "1.19 on",
    "tool_thread_pool": "1.24 on",
    "live_calls_run_plugin_callbacks": "1.27 on",
    "failed_call_cancels_siblings": "1.32 on",
    "live_teardown_cancels_background_tools": "1.39, 2.8 on",
    "stop_background_tool_tasks": "1.39, 2.8 to 2.10",
    "node_runtime": "2.0 on",
    "run_error_callback": "2.5 on",
    "live_run_has_own_task": "2.8 on",
    "abort_signal": "2.11 on",
    "run_async_tool_thread_pool": "2.11 on",
    "background_tool_registry": ISSUE_7058_FIXED_IN.rsplit(".", 1)[0] + " on",
}


def _minor(text: str) -> tuple[int, int]:
    major, minor, _ = parse_version(text.strip())
    return major, minor


def holds(probe: str, release: Release) -> bool:
    """Whether ``probe`` holds on ``release`` by HOLDS_ON (a probe not listed: False)."""
    at = release[:2]
    for piece in HOLDS_ON.get(probe, "").split(","):
        piece = piece.strip()
        if not piece:
            continue
        if piece.endswith(" on"):
            if at >= _minor(piece[:-3]):
                return True
        elif " to " in piece:
            low, high = piece.split(" to ")
            if _minor(low) <= at <= _minor(high):
                return True
        elif at == _minor(piece):
            return True
    return False


#: What each probe that reads ADK's source answers on a release: HOLDS_ON, read for
#: the installed version when the function is there but its source is not (an
#: install of ``.pyc`` files only). An unknown version (no distribution metadata) is
#: taken for the newest tested.
KNOWN_FACTS: dict[str, Callable[[Release], bool]] = {
    probe: functools.partial(holds, probe)
    for probe in ("live_calls_run_plugin_callbacks", "live_tool_hook",
                  "live_send_loop_polls", "failed_call_cancels_siblings",
                  "agent_tool_keeps_app_name")
}


def is_newer_than_tested(installed: str | None = None) -> bool:
    """The installed google-adk (or ``installed``) is newer than NEWEST_TESTED_ADK."""
    return parse_version(installed or ADK_VERSION_STRING) > parse_version(NEWEST_TESTED_ADK)
