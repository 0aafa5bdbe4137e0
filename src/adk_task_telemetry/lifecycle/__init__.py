"""The process around the plugin: the one thread that flushes off the event loop
(``flush_worker``), a ``Runner.close()``'s flush (``close_flush``), and process exit and
SIGTERM as one ordered list (``process_exit``). It may import the facts at the top level
(``semconv``, ``otel_compat``) and nothing else of ours: the engine registers its exit
sweep here and ``configure/`` its pipelines, never the other way round.
Nothing is imported here, so that importing one module loads only what it needs."""
