"""What the engine emits: a tool task's span (``task_spans``), the span processors that
see spans left open and a run span's end (``span_processors``), the contract's metrics
(``metrics``) and the thread pool's gauges (``pool_metrics``), the orphan report
(``orphan_report``), the report of calls left unanswered (``ledger_report``), where a
suspended task waits (``stacks``) and the opt-in capture of arguments and results
(``capture``). A signal is called with what it needs and never calls back into the
engine: it may import ``adk_compat/``, the facts at the top level (``semconv``,
``version``, ``otel_compat``) and the engine's data (``engine.records``) only; never
the rest of ``engine/``, ``lifecycle/``, ``configure/`` or the plugin. The
OpenTelemetry API is its ground; the SDK types it needs come through ``otel_compat``.
Nothing is imported here, so that importing one module loads only what it needs."""
