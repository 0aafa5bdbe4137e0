"""Overhead and scale benchmarks of adk-task-telemetry (issue 6).

Run ``python -m benchmarks.run`` (full, writes benchmarks/results/full.json and
docs/benchmarks.md) or ``python -m benchmarks.run --quick`` (a smoke run that
asserts nothing about time). See docs/benchmarks.md for what each section measures.
"""
