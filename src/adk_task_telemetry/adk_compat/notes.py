"""The once-per-process notes about the installed google-adk: newer than the newest
tested (INFO), and probes that answered without ADK's source (one WARNING). Every plugin
makes them at construction (``live_path.add_live_teardown_listener``); each is logged
once per process (``fresh_notes`` lets a test make them afresh).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from .. import semconv as _sc
from .probes import decided_without_source, features
from .versions import ADK_VERSION_STRING, NEWEST_TESTED_ADK, is_newer_than_tested, parse_version

logger = logging.getLogger(_sc.LOGGER_NAME)


class _Notes:
    """Which once-per-process notes were made, and the release they speak of."""

    __slots__ = ("installed", "newer", "source")

    def __init__(self) -> None:
        self.installed = ADK_VERSION_STRING
        self.newer = False
        self.source = False


_notes = _Notes()


def note_untested_adk() -> None:
    """Logs once per process (INFO) that the installed ADK is newer than any tested.

    The plugin keeps working: every difference it relies on is probed by feature.
    Also where the note of probes decided without ADK's source is made (once).
    """
    note_decided_without_source()
    if _notes.newer or not is_newer_than_tested(_notes.installed):
        return
    _notes.newer = True
    logger.info(
        "adk_task_telemetry: google-adk %s is newer than the newest tested (%s); "
        "features detected: %s", _notes.installed, NEWEST_TESTED_ADK,
        ", ".join(f"{k}={v}" for k, v in features().items()))


def note_decided_without_source() -> None:
    """Logs once per process (one WARNING) which probes found no ADK source to read and
    what they answered from the release's recorded facts: a detection the plugin could
    not make is never silent."""
    if _notes.source:
        return
    without_source = decided_without_source()
    if not without_source:
        return
    _notes.source = True
    release = _notes.installed if parse_version(_notes.installed) > (0, 0, 0) else (
        f"of unknown version (taken for {NEWEST_TESTED_ADK})")
    logger.warning(
        "adk_task_telemetry: google-adk %s is installed without its source files; "
        "%d feature probe(s) answered from what docs/versions.md records for that "
        "release: %s", release, len(without_source),
        ", ".join(f"{k}={v}" for k, v in sorted(without_source.items())))


@contextlib.contextmanager
def fresh_notes(installed: str | None = None) -> Iterator[None]:
    """The once-per-process notes made afresh inside the block, as if the installed
    google-adk were ``installed`` (None: the real one); the state before is put back
    after it. For tests (``adk_task_telemetry.testing.fresh_adk_notes``)."""
    saved = (_notes.installed, _notes.newer, _notes.source)
    _notes.installed = installed or ADK_VERSION_STRING
    _notes.newer = _notes.source = False
    try:
        yield
    finally:
        _notes.installed, _notes.newer, _notes.source = saved
