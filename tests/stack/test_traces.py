"""The user's path, trace side: the agent's spans through deploy/'s collector (tail
sampling as committed) into Jaeger, looked up the way a user does, through Jaeger's own
query API.

The expectations come from the agent run's ground truth (tests/stack/corpus_app.py: the
tools' own record of which bodies outlived their run or raised, the trace each body ran
in, every span the SDK ended), never from what Jaeger returns:

  * every orphan's trace is in Jaeger whole (every span the agent ended in it: the
    orphan's tool_task span with its ``orphaned_task`` event and stack, ADK's run
    span, the run's other tool spans), found by tag and by a metric exemplar's
    trace id (Prometheus 3's exemplar storage, fed by the OTLP path);
  * every trace with a tool that raised is kept whole;
  * traces with nothing wrong are kept at the configured 10 %, within an exact
    binomial tolerance.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
from typing import Any

from adk_task_telemetry import semconv as sc
from tests.stack.conftest import Corpus, Stack, http_json, span_tags
from tests.stack.tracecheck import check_orphan_trace, missing, settled, whole
from tests.stack_programs import wait_until

#: tail_sampling's probabilistic policy in deploy/otel-collector/config.yaml.
RATE = 0.10
#: Chance that a correct sampler fails the rate test: the tolerance is the exact
#: binomial interval holding all but this much of Binomial(n, RATE).
FALSE_ALARM = 1e-6
#: How long the sampler may take to decide a trace: decision_wait after its first span
#: or decision_wait_after_root_received after its root, plus the exporters' batching.
DECIDED_WITHIN = 240.0


def binomial_interval(n: int, p: float, alpha: float) -> tuple[int, int]:
    """The smallest [lo, hi] with P(X < lo) + P(X > hi) <= alpha, X ~ Binomial(n, p),
    cut equally from both tails."""
    # In log space: math.comb(n, k) overflows a float past n of about 1,000.
    pmf = [math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    + k * math.log(p) + (n - k) * math.log1p(-p)) for k in range(n + 1)]
    lo, tail = 0, 0.0
    while tail + pmf[lo] <= alpha / 2:
        tail += pmf[lo]
        lo += 1
    hi, tail = n, 0.0
    while tail + pmf[hi] <= alpha / 2:
        tail += pmf[hi]
        hi -= 1
    return lo, hi


def test_every_orphan_trace_is_whole_in_jaeger_and_found_by_tag(
        stack: Stack, corpus: Corpus) -> None:
    orphans = corpus.of_kind("orphan")
    # The library's application leaks orphan on every ADK (live_stubborn_tool,
    # thread_pool_timeout, live_thread_pool); the seed bug too on ADK before 2.13.
    assert orphans, corpus.truth["units"]
    for t in orphans:
        check_orphan_trace(t, whole(stack.jaeger, t, DECIDED_WITHIN))
    tagged = stack.jaeger.find(corpus.service, {sc.ADK_TOOL_TASK_OUTCOME: "orphaned"})
    assert {t.trace_id for t in orphans} <= set(tagged), sorted(tagged)
    # The search finds only traces where the agent ended an orphaned span (the tools'
    # orphans, and in strict mode the task fire_and_forget's tool spawned, which the
    # plugin cancels itself: no tool's record sees it still running).
    reported = {s["trace_id"] for s in corpus.truth["spans"] if s["outcome"] == "orphaned"}
    assert set(tagged) <= reported, set(tagged) - reported
    units = ", ".join(sorted(u for t in orphans for u in t.units))
    print(f"\norphan traces: {len(orphans)} expected, {len(orphans)} whole in Jaeger, "
          f"{len(tagged)} found by tag ({units})")


def test_every_error_trace_is_kept_whole(stack: Stack, corpus: Corpus) -> None:
    errors = corpus.of_kind("error")
    assert len(errors) >= 20, len(errors)  # the scripted app's failing runs at least
    for t in errors:
        spans = whole(stack.jaeger, t, DECIDED_WITHIN)
        for call_id in t.raised:
            own = [s for s in spans if span_tags(s).get(sc.GEN_AI_TOOL_CALL_ID) == call_id
                   and s["operationName"].startswith(sc.SPAN_NAME_PREFIX)]
            assert [span_tags(s).get(sc.ADK_TOOL_TASK_OUTCOME) for s in own] == ["error"]
    print(f"\nerror traces: {len(errors)} expected, {len(errors)} whole in Jaeger")


def test_clean_traces_are_kept_at_the_configured_rate(stack: Stack, corpus: Corpus) -> None:
    clean = corpus.of_kind("clean")
    n = len(clean)
    assert n >= 500, n
    for t in clean:  # nothing wrong, as sent: no span another policy would keep
        assert all(s["status"] != "ERROR" for s in t.spans), t.spans
    every = {s["trace_id"] for s in corpus.truth["spans"]}
    held = settled(stack.jaeger, stack.ports["collector_metrics"], every, DECIDED_WITHIN)
    kept = [t for t in clean if t.trace_id in held]
    for t in kept:
        assert not missing(t, stack.jaeger.trace(t.trace_id)), t.trace_id
    lo, hi = binomial_interval(n, RATE, FALSE_ALARM)
    print(f"\nclean traces: {n} sent, {len(kept)} kept whole in Jaeger "
          f"({len(kept) / n:.1%}; tolerance [{lo}, {hi}]: Binomial({n}, {RATE}) "
          f"all but {FALSE_ALARM:g})")
    assert lo <= len(kept) <= hi


def exemplars(stack: Stack, query: str, since: float) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": query, "start": since, "end": time.time() + 60})
    return list(http_json(f"{stack.prometheus}/api/v1/query_exemplars?{q}").get("data") or [])


#: The orphan counter: its points are recorded in the orphan's span context, so the
#: SDK's trace-based exemplar filter attaches that trace. (adk_tool_task_duration has no
#: orphaned points: an orphan's duration is not known at its run's end.)
ORPHANS = "adk_tool_task_orphaned_total"


def test_an_orphan_metric_exemplar_leads_to_its_whole_trace(
        stack: Stack, corpus: Corpus) -> None:
    """Alert -> metric -> exemplar -> trace: what a user clicks. The agent pushes
    metrics every 60 s (the default), through the collector to Prometheus' OTLP
    receiver, which keeps exemplars (--enable-feature=exemplar-storage)."""
    since = time.time() - 3600
    found: list[dict[str, Any]] = []
    # The corpus' series only (job = its service.name): other agents of the session
    # (tests/stack/test_stuck_live.py) push orphans to the same Prometheus.
    mine = f'{ORPHANS}{{job="{corpus.service}"}}'

    def some() -> bool:
        nonlocal found
        found = [s for s in exemplars(stack, mine, since) if s.get("exemplars")]
        return bool(found)
    if not wait_until(some, 150, interval=2.0):
        series = http_json(f"{stack.prometheus}/api/v1/series?"
                           + urllib.parse.urlencode({"match[]": ORPHANS}))
        raise AssertionError(f"no exemplar on {ORPHANS}; series: "
                             f"{json.dumps(series.get('data'))[:2000]}")
    orphans = {t.trace_id: t for t in corpus.of_kind("orphan")}
    # Traces where the agent reported an orphan: the tools' orphans, and strict mode's
    # spawned task (fire_and_forget), which no tool body's record sees.
    reported = {s["trace_id"] for s in corpus.truth["spans"] if s["outcome"] == "orphaned"}
    ids = {e["labels"]["trace_id"] for s in found for e in s["exemplars"]}
    assert ids <= reported, (ids - reported, sorted(reported))
    for tid in ids:
        spans = whole(stack.jaeger, corpus.traces[tid], DECIDED_WITHIN)
        if tid in orphans:
            check_orphan_trace(orphans[tid], spans)
        else:
            assert any(span_tags(s).get(sc.ADK_TOOL_TASK_OUTCOME) == "orphaned"
                       for s in spans), tid
    tools = sorted({str(s["seriesLabels"].get("gen_ai_tool_name")) for s in found})
    from_tools = len(ids & set(orphans))
    print(f"\nexemplars on {ORPHANS}: {len(found)} series, {len(ids)} trace ids "
          f"({from_tools} of the tools' orphans), each a trace whole in Jaeger "
          f"(tools {tools})")
