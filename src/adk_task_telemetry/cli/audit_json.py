"""The ``audit --json`` document: a function of the results model and the install
(schema in docs/cli.md; its keys are a contract with the scripts that read it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .results import ENDED_OUTCOMES, Install, Result, Task, exit_code, overall_verdict

SCHEMA = "adk-task-telemetry/audit/v1"


def audit_document(results: Sequence[Result], install: Install | None = None
                   ) -> dict[str, Any]:
    """The ``audit --json`` document; ``install`` defaults to the running one."""
    if install is None:
        from .harness import this_install

        install = this_install()
    scenarios = []
    for r in results:
        scenarios.append({
            "name": r.name,
            "summary": r.summary,
            "mode": r.mode,
            "in_corpus": r.in_corpus,
            "verdict": r.verdict,
            "started": r.started,
            "ended": {o: r.ended.get(o, 0) for o in ENDED_OUTCOMES},
            "orphaned": r.orphaned,
            "orphans_alive": r.orphans_alive,
            "unaccounted": r.unaccounted,
            "duration_s": round(r.wall_s, 4),
            "failure": r.failure,
            "plugin_internal_errors": r.plugin_errors,
            "orphans": [_orphan_json(t) for t in r.tasks if t.orphan is not None],
            "unanswered": [{"call_id": u.call_id, "tool": u.tool, "reason": u.reason,
                            "invocation_id": u.invocation_id} for u in r.unanswered],
            "tasks": [_task_json(t) for t in sorted(r.tasks, key=lambda t: t.start_ns)],
        })
    return {
        "schema": SCHEMA,
        "versions": dict(install.versions),
        "verdict": overall_verdict(results),
        "exit_code": exit_code(results),
        "totals": {
            "scenarios": len(results),
            "scenarios_orphaned": sum(r.verdict == "orphaned" for r in results),
            "scenarios_failed": sum(r.verdict == "failed" for r in results),
            "started": sum(r.started for r in results),
            "ended": {o: sum(r.ended.get(o, 0) for r in results) for o in ENDED_OUTCOMES},
            "orphaned": sum(r.orphaned for r in results),
            "unanswered": sum(len(r.unanswered) for r in results),
        },
        "scenarios": scenarios,
    }


def _task_json(t: Task) -> dict[str, Any]:
    return {"call_id": t.call_id, "tool": t.tool, "kind": t.kind, "outcome": t.outcome,
            "start_unix_nano": t.start_ns, "end_unix_nano": t.end_ns,
            "duration_s": round((t.end_ns - t.start_ns) / 1e9, 6),
            "error_type": t.error_type, "cancel_cause": t.cancel_cause}


def _orphan_json(t: Task) -> dict[str, Any]:
    assert t.orphan is not None
    frame = t.orphan.stuck_at
    return {"call_id": t.call_id, "tool": t.tool, "kind": t.kind,
            "invocation_id": t.invocation_id, "end_trigger": t.orphan.trigger,
            "age_s": t.orphan.age_s, "still_running": t.orphan.still_running,
            "stuck_at": None if frame is None else {
                "file": frame.file, "line": frame.line, "function": frame.func,
                "code": frame.code},
            "stacktrace": t.orphan.stacktrace}
