"""The engine: run and task state and every transition of it (``tracker``), the records
it holds (``records``), where it finds its runs (``run_index``), which asyncio task
drives a run (``run_drivers``), every tracker of the process and their sweep at exit
(``trackers``), strict mode's spawned tasks (``strict_mode``) and a tool call's callable
on ADK's thread pool (``pool_calls``). It stands on the OpenTelemetry API only and may
import ``signals/``, ``lifecycle/``, ``adk_compat/`` and the facts at the top level
(``semconv``, ``version``, ``otel_compat``, ``observe``); never ``configure/``, the
plugin, or anything above it. ``records`` is its data: the one module of the engine that
``signals/`` may import (to read a record), and it imports nothing of ours but facts.
Nothing is imported here, so that importing one module loads only what it needs."""
