"""Seeded, randomly generated lifecycle scenarios on the real ADK Runner.

``generate(seed)`` draws a :class:`Spec` (model turns of tool calls, a caller, a
one-line ``describe()``); ``run_spec(spec, plugins)`` runs it through the real
``Runner`` with the scripted model and returns the :class:`Outcome`: the events
the caller saw and the tools' own ground truth. Every tool body records the
asyncio task running it, how the body ended and when that task finished (a
done-callback the tool adds itself), so an orphan can be judged without asking
the plugin.

When a run ends, observed from outside ADK and the plugin:

* ``end_begin_ns``: the moment the caller stopped consuming or acted to end the
  run (broke out, its timeout's deadline, cancelled its consumer, closed the
  queue or the generator), or the run's generator finished by itself. When the
  run raised its own error, the moment it last yielded an event (it was certainly
  running then; it ended somewhere between that and the error's arrival).
* ``end_ns``: once ADK's own teardown is over as well: every asyncio task that
  appeared during the run and is not a tool body (ADK's run, pump, dispatch and
  finaliser tasks) has finished, the generator is closed (or collected), and
  the loop has turned a few times. Bounded (``TEARDOWN_LIMIT``): a teardown that
  does not finish is recorded as ``teardown_finished=False``.

The *real orphans* are the tool tasks still pending at ``end_ns``. A task that
finished before ``end_begin_ns`` ended inside its run. One that finished in
between ended during the run's end: whether it counts as orphaned depends on
when the run-end sweep looked, which only timestamps can settle (see the
oracle in the tests). After the snapshot, ``cleanup()`` cancels every body
still running and waits, so each task's real end is known.

A caller that cancelled or closed the run waits a bounded time (``ADK_STUCK``) for
ADK to let go: ADK 2.x (its node runtime, 2.0 to 2.13 at least) can deadlock there,
and the caller then cancels once more, which frees it (``Outcome.adk_stuck`` says
where; ``_Run._settle`` says why). Without that bound one such race hung the test.

Some run_async scenarios that consume their run have an overlap (``Spec.answer``):
the client answers the first run's long-running call while that run still works, so
two runs of one session overlap (under one invocation id on ADK 2.x), and the first
ends while a tool of the second runs. Nothing may be reported orphaned then.

Only what the installed ADK supports is generated: live runs where the plugin
sees live tool calls and the end of a live run (adk_compat), live non-blocking
tools where ``google.genai.types`` has ``Behavior``, the abort signal where
``Runner.run_async`` accepts one (detected by feature, never by version).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import random
import sys
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.adk.apps import App
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from adk_task_telemetry import adk_compat as compat
from adk_task_telemetry.scenarios import (
    RUN_TAG,
    PerRunLlm,
    Probe,
    ScriptedLlm,
    TaskTruth,
    text,
)

APP_NAME = "generated"
USER_ID = "user"

# Durations, kept small: about 200 scenarios per ADK version, each run twice
# (with and without the plugin), must take a minute or two on a shared machine.
FAST = 0.002
SLOW = 0.03
#: Added per position in a turn: parallel calls never finish in the same instant.
STAGGER = 0.003
HANG = 30.0  # "blocks": only drawn with callers that end the run while it runs
STUBBORN_CLEANUP = 0.06  # ignoring a cancellation for a while (ADK waits ~1 s)
#: A tool that keeps working this long after its cancellation (``stubborn_slow``): an
#: orphan however long the run's end takes to be seen (issue 23).
STUBBORN_SLOW_CLEANUP = 0.3
STREAM_TICK = 0.01
SPAWNED = 0.2
RUN_TIMEOUT = 0.4
EVENT_TIMEOUT = 0.25
LIVE_DEADLINE = 1.0
GATE_LIMIT = 5.0  # a safety net only: a cold first run can take a second to reach k
AFTER_CLOSE = 0.3
TEARDOWN_LIMIT = 3.0
#: A run the caller cancelled or closed that has not ended by then never will (an ADK
#: deadlock, see _Run._settle): cancellations end in milliseconds, even loaded.
ADK_STUCK = 5.0

#: Tools of run_async scenarios; "hang" and blocking "stubborn" need a caller that ends it.
ASYNC_TOOLS = ("sync", "fast", "slow", "fail", "flaky", "stubborn", "hang", "ticket",
               "spawn", "agent_tool")
# ("cancel_to_error" is a tool of fixed regression specs only: one added to ASYNC_TOOLS
# would change what every seed draws, and the FOUND seeds of the random test replay theirs.
# The edge families below are drawn after everything else, for the same reason.)
#: A tool that raises CancelledError by itself (issue 23: nothing cancelled its task;
#: ADK issue 7172). Put in place of one call of an async scenario (``_draw_edges``).
SELF_CANCEL = "give_up"
#: Edge families (issue 23), each drawn with this chance after every other draw: a
#: self-cancelling call, odd call ids (longer than 256 characters, non-ASCII, spaces,
#: ids that look like another id's duplicate key), a caller that closes the stream on
#: the first event holding a function call (``break``/``break_aclosing`` with k=1).
P_SELF_CANCEL = 0.15
P_ODD_IDS = 0.15
P_CLOSE_FIRST = 0.5
#: Siblings of a self-cancelling call that work on after it gave up (issue 31): each
#: waits for the turn's failure, then works this long more. On ADK 1.x the step's
#: ``gather`` lets the CancelledError out of the run at once, so each outlives the run
#: by about that long (the neighbours of a 1 s grace: well inside, near, well past it).
RUNS_ON = {"runs_on_10ms": 0.01, "runs_on_300ms": 0.3, "runs_on_2s": 2.0}
#: Callers of the self-cancel family: ``consume_catch`` reads the run in the harness's
#: own task, catches the CancelledError the run lets out and goes on working in that
#: task (a retry loop, a server mapping it to a response: ``_Run.work_on``);
#: ``consume_reraise`` reads it in a task of its own that lets the error out (that task
#: ends with it).
SELF_CANCEL_CALLERS = ("consume_catch", "consume_reraise")
#: How long a ``consume_catch`` caller works on in the task that drove the run at most
#: (until every tool body has ended: past the longest of RUNS_ON).
WORK_ON_LIMIT = 3.0
#: Tools of run_live scenarios (non_blocking where the ADK has it).
LIVE_TOOLS = ("sync", "fast", "stream", "stubborn_stream", "non_blocking")
#: Callers: how the caller consumes and ends the run.
ASYNC_CALLERS = ("consume", "break", "break_aclosing", "timeout_run", "timeout_event",
                 "cancel", "abort")
LIVE_CALLERS = ("leave", "aclose_k", "close_queue_k", "cancel_k", "timeout_event")
#: Tools of the answering run of an overlap (``Spec.answer``): slow ones most often, so
#: that the first run usually ends while one still runs.
ANSWER_TOOLS = ("sync", "fast", "slow", "slow", "flaky", "stubborn")
#: The long-running call of the first run that the client answers (``Spec.answer``).
ANSWERED_ID = "lr"
#: RUN_TAG of the answering run (the first run has the default, "").
ANSWER_TAG = "answer"
#: Callers that end a run while a tool still blocks.
_ENDS_BLOCKED = frozenset({"timeout_run", "timeout_event", "cancel", "abort"})


def has_live_non_blocking() -> bool:
    """Live non-blocking tools: ``google.genai.types.Behavior`` exists."""
    return hasattr(types, "Behavior") and hasattr(types, "FunctionResponseScheduling")


@dataclass(frozen=True)
class CallSpec:
    tool: str
    #: None: the model gives no id (ADK fills in ``adk-<uuid>``).
    call_id: str | None


@dataclass(frozen=True)
class Spec:
    """One generated scenario."""

    seed: int
    mode: str  # "async" or "live"
    turns: tuple[tuple[CallSpec, ...], ...]
    caller: str
    k: int  # events the caller reads before it acts (callers that use it)
    #: An overlap (issue 15): the calls of a second run of the same session, which the
    #: client starts by answering the first run's long-running call ``ANSWERED_ID``
    #: while the first run's model works on its last turn (which waits for a tool of
    #: the second run to start). On ADK 2.x both runs have one invocation id.
    answer: tuple[CallSpec, ...] = ()
    #: The calls of the nested run's one tool turn (``agent_tool``'s sub-agent); empty:
    #: one ``fast`` call. A nested-run cut (``generate_nested_cut``) makes it slow enough
    #: that the caller's timeout cuts the run while the nested run works.
    nested: tuple[CallSpec, ...] = ()

    @property
    def blocking(self) -> bool:
        """Tools wait until the run is ended for them (HANG, or stubborn past it)."""
        return self.mode == "async" and self.caller in _ENDS_BLOCKED

    def describe(self) -> str:
        turns = " | ".join(",".join(f"{c.tool}#{_shown_id(c.call_id)}" for c in t)
                           for t in self.turns)
        overlap = (" answer=[" + ",".join(f"{c.tool}#{c.call_id}" for c in self.answer) + "]"
                   if self.answer else "")
        nested = (" nested=[" + ",".join(f"{c.tool}#{c.call_id}" for c in self.nested) + "]"
                  if self.nested else "")
        return (f"seed={self.seed} {self.mode} caller={self.caller} k={self.k} "
                f"[{turns}]{overlap}{nested}")


def _draw_turns(rng: random.Random, mode: str, tools: Sequence[str]
                ) -> list[tuple[CallSpec, ...]]:
    """One to three model turns of one to five calls (ids: fresh, duplicate or none)."""
    n = 0
    turns: list[tuple[CallSpec, ...]] = []
    for _ in range(rng.randint(1, 3)):
        calls: list[CallSpec] = []
        agent_tool_used = False
        for _ in range(rng.randint(1, 5)):
            tool = rng.choice(tools)
            if mode == "live" and rng.random() < 0.3:
                tool = "stream"  # several calls to one streaming tool (issue 7058)
            if tool == "agent_tool":
                if agent_tool_used:  # one nested run per turn: its model is scripted
                    tool = "fast"
                agent_tool_used = True
            r = rng.random()
            if r < 0.1:
                call_id: str | None = None
            elif r < 0.2 and calls and calls[-1].call_id is not None:
                call_id = calls[-1].call_id  # a duplicate id
            else:
                n += 1
                call_id = f"c{n}"
            calls.append(CallSpec(tool, call_id))
        if agent_tool_used and any(c.tool == "fail" for c in calls):
            # A nested run takes as long as it takes: whether it answers before a
            # sibling fails the turn would be a race, not a property of the run.
            calls = [CallSpec("fast", c.call_id) if c.tool == "agent_tool" else c
                     for c in calls]
        turns.append(tuple(calls))
    return turns


def _draw_answer(rng: random.Random) -> tuple[CallSpec, ...]:
    return tuple(CallSpec(rng.choice(ANSWER_TOOLS), f"b{i + 1}")
                 for i in range(rng.randint(1, 3)))


def generate(seed: int) -> Spec:
    """A scenario drawn from ``seed``: the same seed, the same scenario."""
    rng = random.Random(seed)
    mode = "live" if rng.random() < 0.35 else "async"
    if not (compat.LIVE_CALLS_SEEN and compat.LIVE_RUN_END_SEEN) or (
            compat.LIVE_SEND_LOOP_POLLS and sys.version_info < (3, 12)):
        # The plugin would see no live tool call here, or not the end of a live run
        # (no ADK since 1.14: adk_compat hooks the releases that give no signal); or
        # leaving a live run may hang in ADK itself (adk_compat.LIVE_SEND_LOOP_POLLS).
        mode = "async"
    if mode == "async":
        callers = [c for c in ASYNC_CALLERS
                   if c != "abort" or compat.runner_accepts_abort_signal()]
        caller = rng.choice(callers)
        tools = [t for t in ASYNC_TOOLS if t != "hang" or caller in _ENDS_BLOCKED]
    else:
        caller = rng.choice(LIVE_CALLERS)
        tools = [t for t in LIVE_TOOLS if t != "non_blocking" or has_live_non_blocking()]
    turns = _draw_turns(rng, mode, tools)
    # Events the run yields at most: per turn a call event and a response event
    # (and run_async's final text), so the caller's k is always reachable.
    most = 2 * len(turns) + (1 if mode == "async" else 0)
    k = rng.randint(1, most)
    # Drawn last, so that every draw above (and every FOUND seed's scenario) is as it was.
    answer: tuple[CallSpec, ...] = ()
    # (Not where a call fails: the first run would end before the client answers.)
    if (mode == "async" and caller == "consume" and rng.random() < 0.7
            and not any(c.tool == "fail" for t in turns for c in t)):
        turns[0] = (*turns[0], CallSpec("ticket", ANSWERED_ID))
        answer = _draw_answer(rng)
    # Drawn after that (issue 23), so every seed draws all of the above as before; for
    # callers that cut a running tool, ``generate_edge`` draws them (the FOUND seeds of
    # those callers replay theirs unchanged).
    if mode == "async" and caller not in _ENDS_BLOCKED:
        turns, k = _draw_edges(rng, turns, caller, k, answer)
    return Spec(seed, mode, tuple(turns), caller, k, answer)


#: Callers of a nested-run cut: each ends the run while the nested run works.
NESTED_CUT_CALLERS = ("timeout_run", "timeout_event", "cancel", "abort")
#: Tools of the nested run in a nested-run cut: one that blocks (hang, stubborn) always.
NESTED_BLOCKING = ("hang", "stubborn", "stubborn_slow")
NESTED_OTHERS = ("fast", "slow", "sync")
#: Siblings of the AgentTool call in the cut turn.
NESTED_SIBLINGS = ("hang", "stubborn", "stubborn_slow", "fast", "slow", "sync")


def generate_nested_cut(seed: int) -> Spec:
    """A nested-run cut drawn from ``seed`` (issue 23): a turn calls ``agent_tool``, whose
    nested run blocks in a tool of its own, beside zero to three siblings; the caller
    (a timeout around the run or each event, a cancelled consumer, the abort signal)
    ends the run while the nested run works. On ADK 1.x the step's ``gather`` returns
    at its first cancelled child while the nested run still unwinds. ``stubborn_slow``
    keeps working 300 ms after its cancellation: an orphan however that ends."""
    rng = random.Random(f"nested-cut-{seed}")
    callers = [c for c in NESTED_CUT_CALLERS
               if c != "abort" or compat.runner_accepts_abort_signal()]
    caller = rng.choice(callers)
    turns: list[tuple[CallSpec, ...]] = []
    if rng.random() < 0.3:
        turns.append((CallSpec(rng.choice(("fast", "sync")), "c0"),))
    siblings = [CallSpec(rng.choice(NESTED_SIBLINGS), f"c{i + 2}")
                for i in range(rng.randint(0, 3))]
    cut = [CallSpec("agent_tool", "c1"), *siblings]
    rng.shuffle(cut)
    turns.append(tuple(cut))
    nested = [CallSpec(rng.choice(NESTED_BLOCKING), "s1"),
              *(CallSpec(rng.choice(NESTED_OTHERS), f"s{i + 2}")
                for i in range(rng.randint(0, 2)))]
    rng.shuffle(nested)
    k = 2 * len(turns) - 1 if caller == "abort" else 1  # the cut turn's call event
    return Spec(seed, "async", tuple(turns), caller, k, nested=tuple(nested))


def generate_self_cancel(seed: int) -> Spec:
    """A self-cancel family scenario drawn from ``seed`` (issue 31): a turn in which
    one call raises CancelledError by itself (``give_up``) beside one to three
    siblings, at least one of which works on 10 ms, 300 ms or 2 s after it gave up
    (``RUNS_ON``), the others ordinary; a caller that catches what the run lets out
    and goes on, or one that re-raises it (``SELF_CANCEL_CALLERS``). Maybe an ordinary
    turn before. Only where a tool's own CancelledError can be told (``can_self_cancel``)."""
    rng = random.Random(f"self-cancel-{seed}")
    caller = rng.choice(SELF_CANCEL_CALLERS)
    turns: list[tuple[CallSpec, ...]] = []
    if rng.random() < 0.3:
        turns.append((CallSpec(rng.choice(("fast", "sync", "slow")), "c0"),))
    siblings = [CallSpec(rng.choice(tuple(RUNS_ON)), "c2")]
    siblings += [CallSpec(rng.choice((*RUNS_ON, "fast", "slow", "sync")), f"c{i + 3}")
                 for i in range(rng.randint(0, 2))]
    cut = [CallSpec(SELF_CANCEL, "c1"), *siblings]
    rng.shuffle(cut)
    turns.append(tuple(cut))
    return Spec(seed, "async", tuple(turns), caller, 1)


def generate_edge(seed: int) -> Spec:
    """An async scenario of the edge families (issue 23) drawn from ``seed``, with any
    caller: ``generate`` draws them only for a few, and not beside the callers that cut
    a running tool."""
    rng = random.Random(f"edge-{seed}")
    callers = [c for c in ASYNC_CALLERS if c != "abort" or compat.runner_accepts_abort_signal()]
    caller = rng.choice(callers)
    tools = [t for t in ASYNC_TOOLS if t != "hang" or caller in _ENDS_BLOCKED]
    turns = _draw_turns(rng, "async", tools)
    k = rng.randint(1, 2 * len(turns) + 1)
    turns, k = _draw_edges(rng, turns, caller, k, (), chance=3.0)
    return Spec(seed, "async", tuple(turns), caller, k)


def can_self_cancel() -> bool:
    """A tool's own CancelledError can be told from a requested cancellation
    (``Task.cancelling``, Python 3.11 on); before, the plugin cannot tell them apart."""
    return hasattr(asyncio.Task, "cancelling")


def _draw_edges(rng: random.Random, turns: list[tuple[CallSpec, ...]], caller: str, k: int,
                answer: tuple[CallSpec, ...], chance: float = 1.0
                ) -> tuple[list[tuple[CallSpec, ...]], int]:
    """The edge families of an async scenario: a self-cancelling call, odd call ids,
    the stream closed on the first event holding a function call (each family's
    chance times ``chance``)."""
    if rng.random() < P_SELF_CANCEL * chance and not answer and can_self_cancel():
        # Not where the first run must reach its last turn (an overlap), nor beside a
        # nested run (whether it answers before its sibling gives up is a race).
        n = rng.randrange(len(turns))
        if not any(c.tool == "agent_tool" for c in turns[n]):
            i = rng.randrange(len(turns[n]))
            turn = list(turns[n])
            turn[i] = CallSpec(SELF_CANCEL, turn[i].call_id)
            turns[n] = tuple(turn)
    if rng.random() < P_ODD_IDS * chance:
        odd: dict[str, str] = {}
        for call_id in [c.call_id for t in turns for c in t]:
            if call_id is not None and call_id != ANSWERED_ID and call_id not in odd:
                odd[call_id] = _odd_id(rng, call_id)
        turns = [tuple(CallSpec(c.tool, odd.get(c.call_id, c.call_id) if c.call_id else None)
                       for c in t) for t in turns]
    if caller in ("break", "break_aclosing") and rng.random() < P_CLOSE_FIRST * chance:
        k = 1  # the first event holds the first turn's calls: no tool has run yet
    return turns, k


def _odd_id(rng: random.Random, call_id: str) -> str:
    """An id a model may give: past 256 characters, non-ASCII, with spaces, or one
    that looks like a duplicate's key (``c1#2``). Each keeps ``call_id`` in it, so
    distinct ids stay distinct and duplicates stay duplicates."""
    shape = rng.randrange(4)
    if shape == 0:
        return f"{call_id}-" + "x" * rng.randint(256, 600)
    if shape == 1:
        return f"é{call_id}-ünïcødé-" + "ÿ" * rng.randint(250, 300)
    if shape == 2:
        return f"{call_id} with spaces"
    return f"{call_id}#2"


def _shown_id(call_id: str | None) -> str:
    if call_id is None:
        return "-"
    return call_id if len(call_id) <= 40 else f"{call_id[:12]}...[{len(call_id)}]"


def generate_overlap(seed: int) -> Spec:
    """An overlap drawn from ``seed`` (every seed gives one; ``generate`` gives one for
    a few): the first run's turns from the tools that let it reach its last turn."""
    rng = random.Random(f"overlap-{seed}")
    tools = [t for t in ASYNC_TOOLS if t not in ("hang", "fail")]
    turns = _draw_turns(rng, "async", tools)
    turns[0] = (*turns[0], CallSpec("ticket", ANSWERED_ID))
    return Spec(seed, "async", tuple(turns), "consume", 1, _draw_answer(rng))


# --- ground truth ------------------------------------------------------------------


@dataclass
class Outcome:
    """What running a spec produced."""

    spec: Spec
    truth: Probe
    events: list[Any] = field(default_factory=list)
    error: BaseException | None = None
    end_begin_ns: int = 0
    end_ns: int = 0
    teardown_finished: bool = True
    #: The caller cut the run short (its timeout fired, or it cancelled its consumer
    #: mid-run): where it cuts is timing, not the scenario.
    cut: bool = False
    #: When the task the caller cancelled to cut the run (its timeout's, its consumer)
    #: was done: its own first done-callback, added before ADK or a plugin could add
    #: one. The caller sees the run end then. 0 where the caller cut nothing (but for
    #: ``consume_reraise``, whose consumer's end is when it saw the run end).
    cut_seen_ns: int = 0
    #: The tool tasks already done at that moment (looked at in that callback): they
    #: ended inside the run, however late their own done-callbacks run.
    done_at_cut: list[TaskTruth] = field(default_factory=list)
    #: Call ids pending at ``end_ns`` (one entry per task: duplicates repeat).
    real_orphans: list[TaskTruth] = field(default_factory=list)
    #: Where ADK did not let go of a run the caller had cancelled or closed within
    #: ADK_STUCK (the caller then cancelled once more): ADK's deadlock, not a plugin's.
    adk_stuck: list[str] = field(default_factory=list)

    def normalized_events(self) -> list[tuple[Any, ...]]:
        """Authors, calls and responses by name and id, texts: comparable across runs."""
        return normalize(self.events, live=self.spec.mode == "live")


def _norm_id(call_id: str | None) -> str:
    if call_id and call_id.startswith("adk-"):
        return "adk-*"
    return call_id or ""


def normalize(events: Sequence[Any], *, live: bool = False) -> list[tuple[Any, ...]]:
    """Authors, calls and responses by name and normalized id, texts.

    ``live``: without the answers of non-blocking tools, which arrive when their
    background task finishes, so whether one comes before the caller acts is timing.
    """
    out: list[tuple[Any, ...]] = []
    for event in events:
        if getattr(event, "partial", False) or not event.content or not event.content.parts:
            continue
        parts: list[tuple[Any, ...]] = []
        for p in event.content.parts:
            if p.function_call is not None:
                parts.append(("call", p.function_call.name, _norm_id(p.function_call.id)))
            elif p.function_response is not None:
                if live and p.function_response.name == "non_blocking":
                    continue
                resp = json.dumps(p.function_response.response, sort_keys=True, default=str)
                parts.append(("response", p.function_response.name,
                              _norm_id(p.function_response.id), resp))
            elif p.text:
                parts.append(("text", p.text))
        if parts:
            out.append((event.author, tuple(parts)))
    return out


# --- tools -----------------------------------------------------------------------


class _Recover(BasePlugin):
    """An application's error policy: turns a ConnectionError into a result."""

    def __init__(self, truth: Probe) -> None:
        super().__init__(name="recover_connection_errors")
        self._truth = truth

    async def on_tool_error_callback(self, *, tool: Any, tool_args: Any, tool_context: Any,
                                     error: Exception) -> dict[str, str] | None:
        if isinstance(error, ConnectionError):
            self._truth.mark_recovered(str(tool_context.function_call_id or ""))
            return {"error": "temporarily unavailable"}
        return None


class _TruthAgentTool(AgentTool):
    """An AgentTool whose call records its own task, as every tool here does."""

    def __init__(self, agent: LlmAgent, truth: Probe) -> None:
        super().__init__(agent=agent)
        self._truth = truth

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        with self._truth.body(tool_context, "agent_tool"):
            return await super().run_async(args=args, tool_context=tool_context)


def _tools(truth: Probe, spec: Spec) -> list[Any]:
    blocking = spec.blocking
    stubborn_wait = HANG if blocking else SLOW
    #: Per turn that has a failing call: done once that call's task is done.
    failures: dict[int, asyncio.Future[None]] = {}

    def failure(turn: int) -> asyncio.Future[None]:
        if turn not in failures:
            failures[turn] = asyncio.get_running_loop().create_future()
        return failures[turn]

    def fails(record: TaskTruth, turn: int) -> None:
        """A failing body: the turn's failure is its task being done. ADK's gather added
        its done-callback when it made the task, before this one: it has the error
        first, and a sibling resumes two loop turns after it."""
        if turn >= 0:
            failed = failure(turn)
            record.task.add_done_callback(
                lambda _t: None if failed.done() else failed.set_result(None))

    async def pause(seconds: float, turn: int) -> None:
        """Sleeps ``seconds``; a sibling of a failing call then waits for the failure
        (GATE_LIMIT is a safety net: a failing call that never ran)."""
        await asyncio.sleep(seconds)
        if turn >= 0:
            await asyncio.wait([failure(turn)], timeout=GATE_LIMIT)

    def sync(delay: float, tool_context: ToolContext) -> dict[str, str]:
        """A sync tool."""
        with truth.body(tool_context, "sync"):
            return {"sync": "ok"}

    async def fast(delay: float, tool_context: ToolContext, turn: int = -1) -> dict[str, str]:
        """A fast async tool."""
        with truth.body(tool_context, "fast"):
            await pause(FAST + delay, turn)
            return {"fast": "ok"}

    async def slow(delay: float, tool_context: ToolContext, turn: int = -1) -> dict[str, str]:
        """A slower async tool."""
        with truth.body(tool_context, "slow"):
            await pause(SLOW + delay, turn)
            return {"slow": "ok"}

    async def hang(delay: float, tool_context: ToolContext) -> dict[str, str]:
        """Waits until cancelled."""
        with truth.body(tool_context, "hang"):
            truth.blocked.set()
            await asyncio.sleep(HANG)
            return {"hang": "ok"}

    async def fail(delay: float, tool_context: ToolContext, turn: int = -1) -> dict[str, str]:
        """Raises."""
        with truth.body(tool_context, "fail") as record:
            fails(record, turn)
            await asyncio.sleep(FAST + delay)
            raise ValueError("the tool failed")

    async def flaky(delay: float, tool_context: ToolContext, turn: int = -1) -> dict[str, str]:
        """Raises an error that a callback answers for."""
        with truth.body(tool_context, "flaky"):
            await pause(FAST + delay, turn)
            raise ConnectionError("upstream refused the connection")

    async def stubborn(delay: float, tool_context: ToolContext, turn: int = -1) -> dict[str, str]:
        """Cleans up for a while when cancelled, then stops."""
        with truth.body(tool_context, "stubborn"):
            if blocking:
                truth.blocked.set()
            try:
                await pause(stubborn_wait + delay, turn)
            except asyncio.CancelledError:
                await asyncio.sleep(STUBBORN_CLEANUP)
                raise
            return {"stubborn": "ok"}

    async def stubborn_slow(delay: float, tool_context: ToolContext) -> dict[str, str]:
        """Keeps working STUBBORN_SLOW_CLEANUP after it is cancelled, then stops."""
        with truth.body(tool_context, "stubborn_slow"):
            if blocking:
                truth.blocked.set()
            try:
                await asyncio.sleep(stubborn_wait + delay)
            except asyncio.CancelledError:
                await asyncio.sleep(STUBBORN_SLOW_CLEANUP)
                raise
            return {"stubborn_slow": "ok"}

    def ticket(delay: float, tool_context: ToolContext) -> dict[str, str]:
        """Opens a ticket a human resolves later (long-running)."""
        with truth.body(tool_context, "ticket"):
            return {"status": "pending"}

    async def spawn(delay: float, tool_context: ToolContext) -> dict[str, str]:
        """Starts fire-and-forget work and returns."""
        with truth.body(tool_context, "spawn"):
            truth.spawned.append(asyncio.ensure_future(asyncio.sleep(SPAWNED)))
            return {"spawned": "ok"}

    async def stream(delay: float, tool_context: ToolContext) -> AsyncGenerator[str, None]:
        """Streams ticks until stopped (a live streaming tool)."""
        with truth.body(tool_context, "stream"):
            while True:
                await asyncio.sleep(STREAM_TICK)
                yield "tick"

    async def stubborn_stream(delay: float,
                              tool_context: ToolContext) -> AsyncGenerator[str, None]:
        """Streams ticks; cleans up for a while when cancelled."""
        with truth.body(tool_context, "stubborn_stream"):
            while True:
                try:
                    await asyncio.sleep(STREAM_TICK)
                except asyncio.CancelledError:
                    await asyncio.sleep(STUBBORN_CLEANUP)
                    raise
                yield "tick"

    async def cancel_to_error(delay: float, tool_context: ToolContext) -> dict[str, str]:
        """Waits until cancelled, then raises an error instead (a client library that
        wraps its cancellation in an error of its own)."""
        with truth.body(tool_context, "cancel_to_error"):
            truth.blocked.set()
            try:
                await asyncio.sleep(HANG)
            except asyncio.CancelledError:
                raise RuntimeError("request cancelled") from None
            return {"cancel_to_error": "ok"}

    async def give_up(delay: float, tool_context: ToolContext, turn: int = -1) -> dict[str, str]:
        """Raises CancelledError by itself: its client library cancelled its own future
        (ADK issue 7172's shape); nothing cancelled this task."""
        with truth.body(tool_context, SELF_CANCEL) as record:
            fails(record, turn)
            await asyncio.sleep(FAST + delay)
            record.self_cancelled = True
            raise asyncio.CancelledError

    def runs_on(name: str) -> Callable[..., Any]:
        after = RUNS_ON[name]

        async def body(delay: float, tool_context: ToolContext,
                       turn: int = -1) -> dict[str, str]:
            with truth.body(tool_context, name):
                await pause(FAST + delay, turn)  # until its turn's call gave up
                await asyncio.sleep(after)  # then works on: past the run on ADK 1.x
                return {name: "ok"}
        body.__name__ = body.__qualname__ = name
        body.__doc__ = f"Works on {after:g} s after its turn's failure, then answers."
        return body

    async def non_blocking(delay: float, tool_context: ToolContext) -> dict[str, str]:
        """Works in the background (a live non-blocking tool)."""
        with truth.body(tool_context, "non_blocking"):
            await asyncio.sleep(SLOW + delay)
            return {"background": "done"}

    plain = (sync, fast, slow, hang, fail, flaky, stubborn, spawn, stream, stubborn_stream,
             cancel_to_error, give_up, stubborn_slow, *(runs_on(n) for n in RUNS_ON))
    used = {c.tool for t in (*spec.turns, spec.answer) for c in t}
    nested_calls = spec.nested or (CallSpec("fast", "sub-call"),)
    out: list[Any] = [f for f in plain if f.__name__ in used]
    if "ticket" in used:
        out.append(LongRunningFunctionTool(ticket))
    if "non_blocking" in used:
        tool = FunctionTool(non_blocking)
        tool.behavior = types.Behavior.NON_BLOCKING  # type: ignore[attr-defined]
        tool.response_scheduling = types.FunctionResponseScheduling.WHEN_IDLE  # type: ignore[attr-defined]
        out.append(tool)
    if "agent_tool" in used:
        sub_model = ScriptedLlm(turns=[_parts(nested_calls), [text("found")]], repeat=True)
        sub_tools = {c.tool for c in nested_calls}
        sub = LlmAgent(name="agent_tool", description="Looks things up.", model=sub_model,
                       instruction="scripted", tools=[f for f in plain if f.__name__ in sub_tools])
        out.append(_TruthAgentTool(sub, truth))
    return out


def _parts(calls: Sequence[CallSpec], turn: int = -1) -> list[types.Part]:
    """The function-call parts of one model turn (``turn``: its index in the spec).

    A failing (or self-cancelling) call fails the turn: then every call of the turn gets
    the turn's index, and its siblings answer only once the failure has happened (the
    failing call's task is done: ADK has seen it), however a loaded machine stalls the
    loop. A sleep would only make that likely (seed 52 lost that race once)."""
    failing = ("fail", SELF_CANCEL)
    fails = turn >= 0 and any(c.tool in failing for c in calls)

    def args(i: int, c: CallSpec) -> dict[str, Any]:
        if c.tool == "agent_tool":
            return {"request": "look it up"}
        return {"delay": i * STAGGER, **({"turn": turn} if fails else {})}
    return [types.Part(function_call=types.FunctionCall(name=c.tool, args=args(i, c),
                                                        id=c.call_id))
            for i, c in enumerate(calls)]


# --- running -----------------------------------------------------------------------


class _Run:
    def __init__(self, spec: Spec, plugins: Sequence[BasePlugin]) -> None:
        self.spec = spec
        self.truth = Probe()
        self.out = Outcome(spec, self.truth)
        tools = _tools(self.truth, spec)
        self.answer_now = asyncio.Event()  # the first run's last model turn has begun
        self.model: ScriptedLlm | PerRunLlm
        if spec.answer:
            self.model = self._overlap_model()
        elif spec.mode == "async":
            self.model = ScriptedLlm(turns=[*(_parts(t, n) for n, t in enumerate(spec.turns)),
                                            [text("done")]])
        else:
            self.model = ScriptedLlm(live_ends_on_close=True)
        agent = LlmAgent(name="agent", model=self.model, instruction="scripted", tools=tools)
        app = App(name=APP_NAME, root_agent=agent,
                  plugins=[*plugins, _Recover(self.truth)])
        self.runner = Runner(app=app, session_service=InMemorySessionService())
        self.before: set[asyncio.Task[Any]] = set()
        self.last_event_ns = 0
        self.session_id = ""

    def _overlap_model(self) -> PerRunLlm:
        """The first run's turns, then a last turn that lets the client answer and waits
        for the answering run's first tool; the answering run's turn of calls."""
        def turn(parts: list[types.Part]) -> Any:
            async def replay() -> list[types.Part]:
                return parts
            return replay

        async def last() -> list[types.Part]:
            self.answer_now.set()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.truth.began_under(ANSWER_TAG).wait(), GATE_LIMIT)
            return [text("done")]
        return PerRunLlm({"": [*(turn(_parts(t, n)) for n, t in enumerate(self.spec.turns)), last],
                          ANSWER_TAG: [turn(_parts(self.spec.answer)),
                                       turn([text("answered")])]})

    async def _answer(self, sid: str) -> None:
        """The client answers the long-running call once the first run's last turn has
        begun: a second run of the session, in the caller's context (not ADK's)."""
        await self.answer_now.wait()
        RUN_TAG.set(ANSWER_TAG)
        message = types.Content(role="user", parts=[types.Part(
            function_response=types.FunctionResponse(id=ANSWERED_ID, name="ticket",
                                                     response={"status": "approved"}))])
        async with contextlib.aclosing(self.runner.run_async(
                user_id=USER_ID, session_id=sid, new_message=message)) as agen:
            async for event in agen:
                self._got(event)

    def _mark_end(self) -> None:
        if not self.out.end_begin_ns:
            self.out.end_begin_ns = time.time_ns()

    async def _read_with_event_timeout(self, agen: Any) -> None:
        """Reads with a ``wait_for`` around every event until one times out (the run's
        end) or the run is over."""
        start, limit = time.time_ns(), GATE_LIMIT
        try:
            while True:
                start = time.time_ns()
                # The first event only starts the run: a loaded machine may take a
                # while, and a timeout there would be a race, not a scenario.
                limit = EVENT_TIMEOUT if self.out.events else GATE_LIMIT
                self._got(await self._within(agen.__anext__(), limit, "an event's timeout"))
        except asyncio.TimeoutError:
            self.out.end_begin_ns = start + int(limit * 1e9)
            self.out.cut = True
        except StopAsyncIteration:
            pass

    def _got(self, event: Any) -> None:
        self.out.events.append(event)
        self.last_event_ns = time.time_ns()

    def _counted(self) -> int:
        """Live events that count towards k: all but a non-blocking tool's answer,
        which arrives whenever its background task finishes."""
        return len(normalize(self.out.events, live=True))

    # --- waiting for ADK to let go ------------------------------------------------

    async def _settle(self, task: asyncio.Future[Any], what: str) -> None:
        """Waits for ``task`` (it drives the run, which the caller cancelled, aborted or
        cut short) to end, at most ADK_STUCK; then cancels it once more and waits again.

        ADK 2.x deadlocks here when its root task's cancellation meets a tool task that
        ends with an error at that moment (a tool that raised just then, or one that
        turns its cancellation into an error): ``asyncio.gather`` reports the error,
        not the cancellation, so ADK's node runner enqueues an error event and waits
        for the consumer, which is gone, to process it, while ``_cleanup_root_task``
        awaits the root task for ever. A second cancellation frees it.
        """
        done, _ = await asyncio.wait([task], timeout=ADK_STUCK)
        if not done:
            self.out.adk_stuck.append(what)
            task.cancel()
            await asyncio.wait([task], timeout=ADK_STUCK)

    async def _within(self, aw: Any, timeout: float, what: str) -> Any:
        """``asyncio.wait_for``, except that a cancellation ADK never finishes is
        settled (``_settle``) instead of waited for without end. As with wait_for, what
        the cancelled task ended with anyway (a result, an error) is what it returns."""
        task = asyncio.ensure_future(aw)
        seen = self._seen_end(task)
        done, _ = await asyncio.wait([task], timeout=timeout)
        if not done:
            task.cancel()
            await self._settle(task, what)
            self._note_cut(seen)
            if not task.done() or task.cancelled():
                raise asyncio.TimeoutError
        return task.result()

    def _seen_end(self, task: asyncio.Future[Any]) -> list[tuple[int, list[TaskTruth]]]:
        """When ``task`` is done, and which tool tasks were done by then (filled by its
        first done-callback: added here, right after it was made, before anything else
        could add one)."""
        seen: list[tuple[int, list[TaskTruth]]] = []
        task.add_done_callback(lambda _t: seen.append(
            (time.time_ns(), [t for t in self.truth.records if t.task.done()])))
        return seen

    def _note_cut(self, seen: list[tuple[int, list[TaskTruth]]]) -> None:
        if seen:
            self.out.cut_seen_ns, self.out.done_at_cut = seen[0]

    @contextlib.contextmanager
    def _unstick(self, what: str) -> Any:
        """Around an await in the caller's own task that ends ADK's run (closing its
        generator): past ADK_STUCK the task is cancelled once more (``_settle``)."""
        me = asyncio.current_task()
        assert me is not None
        fired: list[bool] = []

        def fire() -> None:
            fired.append(True)
            me.cancel()
        handle = asyncio.get_running_loop().call_later(ADK_STUCK, fire)
        try:
            yield
        except asyncio.CancelledError:
            if not fired:
                raise
        finally:
            handle.cancel()
            if fired:
                self.out.adk_stuck.append(what)
                if hasattr(me, "uncancel"):  # 3.11+: the cancellation was ours, handled
                    me.uncancel()

    async def run(self) -> Outcome:
        session = await self.runner.session_service.create_session(
            app_name=APP_NAME, user_id=USER_ID)
        self.session_id = str(session.id)
        self.before = set(asyncio.all_tasks())
        self.last_event_ns = time.time_ns()
        try:
            if self.spec.mode == "async":
                await self._run_async(str(session.id))
            else:
                await self._run_live(str(session.id))
        except Exception as e:  # the run's own error, as the caller sees it
            self.out.error = e
            if not self.out.end_begin_ns:
                self.out.end_begin_ns = self.last_event_ns
        except asyncio.CancelledError as e:
            me = asyncio.current_task()
            if me is None or not can_self_cancel() or me.cancelling():
                raise  # the caller's own task was cancelled
            # A tool's own CancelledError that ADK 1.x lets out of the run: its error.
            self.out.error = e
            if not self.out.end_begin_ns:
                self.out.end_begin_ns = self.last_event_ns
        self._mark_end()
        await self._teardown()
        self.out.end_ns = time.time_ns()
        self.out.real_orphans = self.truth.running()
        if self.spec.caller == "consume_catch":
            await self._work_on()
        return self.out

    async def _work_on(self) -> None:
        """A caller that caught what the run raised goes on with other work in the task
        that drove the run (it does not end with the run): here, until every tool body
        has ended (a positive signal), at most WORK_ON_LIMIT."""
        left = [t.task for t in self.truth.records if not t.task.done()]
        if left:
            await asyncio.wait(left, timeout=WORK_ON_LIMIT)
    async def _teardown(self) -> None:
        """Waits until every task of ADK's that appeared during the run has ended."""
        if self.spec.caller == "break":
            # An abandoned generator: let asyncio schedule its aclose(). Only here:
            # a collection takes long enough for a tool to finish meanwhile.
            gc.collect()
        deadline = time.monotonic() + TEARDOWN_LIMIT
        while True:
            for _ in range(3):
                await asyncio.sleep(0)
            left = self._adk_tasks_left()
            remaining = deadline - time.monotonic()
            if not left:
                return
            if remaining <= 0:
                self.out.teardown_finished = False
                return
            await asyncio.wait(left, timeout=remaining)

    def _adk_tasks_left(self) -> list[asyncio.Task[Any]]:
        me, own = asyncio.current_task(), self.truth.own_tasks()
        return [t for t in asyncio.all_tasks()
                if t not in self.before and t is not me and t not in own and not t.done()]

    async def close(self) -> None:
        await self.truth.cleanup()
        left = self._adk_tasks_left()
        if left:  # ADK's deadlock in a task of its own (an abandoned generator's finaliser)
            _, pending = await asyncio.wait(left, timeout=ADK_STUCK)
            if pending:  # cancelled once more, it lets go (_settle)
                self.out.adk_stuck.append("ADK's own task")
                for t in pending:
                    t.cancel()
                await asyncio.wait(pending, timeout=ADK_STUCK)
        with contextlib.suppress(Exception):
            await self.runner.close()
        for _ in range(3):
            await asyncio.sleep(0)

    async def stored_events(self) -> list[Any]:
        """What the session service kept: the truth of which calls got a response."""
        session = await self.runner.session_service.get_session(
            app_name=APP_NAME, user_id=USER_ID, session_id=self.session_id)
        return list(session.events) if session is not None else []

    # --- run_async callers -------------------------------------------------------

    async def _run_async(self, sid: str) -> None:
        spec = self.spec
        kwargs: dict[str, Any] = {}
        abort: asyncio.Event | None = None
        if spec.caller == "abort":
            abort = asyncio.Event()
            kwargs["abort_signal"] = abort
        content = types.Content(role="user", parts=[types.Part(text="go")])
        agen = self.runner.run_async(user_id=USER_ID, session_id=sid, new_message=content,
                                     **kwargs)

        async def consume_all() -> None:
            async for event in agen:
                self._got(event)

        caller = spec.caller
        if caller == "consume" and spec.answer:
            # Both runs are the caller's: it ends the scenario once both are over.
            answering = asyncio.ensure_future(self._answer(sid))
            try:
                async with contextlib.aclosing(agen):
                    await consume_all()
                if self.answer_now.is_set():
                    await answering
            finally:
                if not answering.done():
                    answering.cancel()
                    await asyncio.gather(answering, return_exceptions=True)
        elif caller in ("consume", "consume_catch"):  # the latter goes on: run()
            async with contextlib.aclosing(agen):
                await consume_all()
        elif caller == "consume_reraise":
            # Reads the run in a task of its own that lets out whatever the run raises
            # (a tool's own CancelledError ends that task cancelled); the caller then
            # takes it from the task (``run`` treats it as the run's error).
            async def consume_closing() -> None:
                async with contextlib.aclosing(agen):
                    await consume_all()
            consumer = asyncio.ensure_future(consume_closing())
            seen = self._seen_end(consumer)
            await asyncio.wait([consumer])
            self._note_cut(seen)
            consumer.result()
        elif caller in ("break", "break_aclosing"):
            async def read_k() -> None:
                async for event in agen:
                    self._got(event)
                    if len(self.out.events) >= spec.k:
                        self._mark_end()
                        break
            if caller == "break_aclosing":
                try:
                    await read_k()
                finally:
                    with self._unstick("aclose"):
                        await agen.aclose()
            else:
                await read_k()
                del agen  # abandoned: finalised by the garbage collector
        elif caller == "timeout_run":
            start = time.time_ns()
            try:
                await self._within(consume_all(), RUN_TIMEOUT, "the run's timeout")
            except asyncio.TimeoutError:
                self.out.end_begin_ns = start + int(RUN_TIMEOUT * 1e9)
                self.out.cut = True
            with self._unstick("aclose"):
                await agen.aclose()
        elif caller == "timeout_event":
            await self._read_with_event_timeout(agen)
            with self._unstick("aclose"):
                await agen.aclose()
        elif caller == "cancel":
            # The consumer keeps only its first k events, then reads on without
            # keeping any: where it is cancelled varies, what it kept does not.
            reached = asyncio.Event()

            async def consume_then_wait() -> None:
                async for event in agen:
                    if len(self.out.events) < spec.k:
                        self._got(event)
                    if len(self.out.events) >= spec.k:
                        reached.set()
            consumer = asyncio.ensure_future(consume_then_wait())
            seen = self._seen_end(consumer)
            await self._until(consumer, reached)
            cancelled = not consumer.done()
            if cancelled:
                self._mark_end()
                consumer.cancel()
                self.out.cut = True
            await self._settle(consumer, "the cancelled consumer")
            if cancelled:
                self._note_cut(seen)
            if consumer.done() and not consumer.cancelled() and consumer.exception():
                raise consumer.exception()  # type: ignore[misc]  # the run's own error
            with self._unstick("aclose"):
                await agen.aclose()
        elif caller == "abort":
            # The consumer pauses after k events until the abort is signalled
            # (or is inside the step that blocks when it is), then reads to the end.
            reached, go_on = asyncio.Event(), asyncio.Event()

            async def consume_with_gate() -> None:
                async for event in agen:
                    self._got(event)
                    if len(self.out.events) == spec.k:
                        reached.set()
                        await go_on.wait()
            consumer = asyncio.ensure_future(consume_with_gate())
            await self._until(consumer, reached)
            self._mark_end()
            assert abort is not None
            abort.set()
            go_on.set()
            await self._settle(consumer, "the aborted consumer")
            if consumer.done() and not consumer.cancelled():
                consumer.exception()  # retrieved: the caller does not re-raise it
            with self._unstick("aclose"):
                await agen.aclose()
        else:  # pragma: no cover
            raise ValueError(caller)

    async def _until(self, consumer: asyncio.Future[Any], reached: asyncio.Event) -> None:
        """Until the consumer kept its k events, a tool blocks, or the consumer ended."""
        waits = [asyncio.ensure_future(reached.wait()),
                 asyncio.ensure_future(self.truth.blocked.wait())]
        try:
            await asyncio.wait([consumer, *waits], timeout=GATE_LIMIT,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    # --- run_live callers --------------------------------------------------------

    async def _run_live(self, sid: str) -> None:
        spec = self.spec
        queue = LiveRequestQueue()
        config = RunConfig(streaming_mode=StreamingMode.BIDI,
                           response_modalities=[types.Modality.TEXT])
        agen = self.runner.run_live(user_id=USER_ID, session_id=sid,
                                    live_request_queue=queue, run_config=config)
        assert isinstance(self.model, ScriptedLlm)  # overlaps are run_async only
        for turn in spec.turns:
            self.model.say_live(*_parts(turn))
        want = sum(len(t) for t in spec.turns)

        def answered() -> bool:
            seen = [p for e in self.out.events if e.content and e.content.parts
                    for p in e.content.parts if p.function_response is not None]
            return len(seen) >= want

        async def consume(stop: Callable[[], bool]) -> None:
            async for event in agen:
                self._got(event)
                if stop():
                    return

        caller = spec.caller
        try:
            if caller in ("leave", "aclose_k"):
                stop = answered if caller == "leave" else (
                    lambda: self._counted() >= spec.k)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(consume(stop), LIVE_DEADLINE)
                self._mark_end()
            elif caller == "close_queue_k":
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(
                        consume(lambda: self._counted() >= spec.k), LIVE_DEADLINE)
                self._mark_end()
                queue.close()
                # Read on until the run ends; what arrives after the close races
                # with it, so it is not kept.
                async def drain() -> None:
                    async for _ in agen:
                        pass
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(drain(), AFTER_CLOSE)
            elif caller == "cancel_k":
                reached = asyncio.Event()

                async def consume_then_wait() -> None:
                    async for event in agen:
                        if self._counted() < spec.k:
                            self._got(event)
                        if self._counted() >= spec.k:
                            reached.set()
                consumer = asyncio.ensure_future(consume_then_wait())
                await self._until(consumer, reached)
                self._mark_end()
                consumer.cancel()
                await asyncio.gather(consumer, return_exceptions=True)
            elif caller == "timeout_event":
                await self._read_with_event_timeout(agen)
            else:  # pragma: no cover
                raise ValueError(caller)
        finally:
            self._mark_end()
            with contextlib.suppress(RuntimeError):
                await agen.aclose()
            queue.close()


async def run_spec(spec: Spec, plugins: Sequence[BasePlugin]) -> tuple[Outcome, _Run]:
    """Runs ``spec`` with ``plugins`` (registered before the scenario's own).

    Tool bodies still running at the end are left to ``close()`` of the returned
    handle, so the caller can look at them first.
    """
    run = _Run(spec, plugins)
    return await run.run(), run


__all__ = ["ANSWER_TOOLS", "ASYNC_CALLERS", "ASYNC_TOOLS", "LIVE_CALLERS", "LIVE_TOOLS",
           "RUNS_ON", "SELF_CANCEL", "SELF_CANCEL_CALLERS", "CallSpec", "Outcome", "Spec",
           "can_self_cancel", "generate", "generate_edge", "generate_nested_cut",
           "generate_overlap", "generate_self_cancel", "has_live_non_blocking", "normalize",
           "run_spec"]
