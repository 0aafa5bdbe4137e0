"""Child of test_export_fork.py: ends two spans that stay in configure_telemetry()'s
span buffer (no delay can send them), forks, and has each process end one span of its
own and flush. Prints the child's exit status."""

from __future__ import annotations

import os
import sys

from adk_task_telemetry.configure import detached


def main(endpoint: str) -> None:
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "600000"  # nothing goes out but by a flush
    handle = detached(endpoint=endpoint, protocol="http/protobuf", service_name="fork")
    assert handle.tracer_provider is not None
    tracer = handle.tracer_provider.get_tracer("fork")
    for name in ("before-fork-1", "before-fork-2"):
        tracer.start_span(name).end()
    pid = os.fork()
    if pid == 0:  # the child: its buffer must start empty, its sender must work
        code = 1
        try:
            tracer.start_span("child").end()
            code = 0 if handle.force_flush(timeout_millis=20_000) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    tracer.start_span("parent").end()
    flushed = handle.force_flush(timeout_millis=20_000)
    handle.shutdown()
    print(f"child={os.waitstatus_to_exitcode(status)} parent_flushed={flushed}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
