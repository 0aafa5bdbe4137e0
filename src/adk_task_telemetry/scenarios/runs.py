"""What a scenario is, what its run recorded, and the Harness that runs it on the real
ADK Runner (App, session, run_async or run_live), waiting for positive signals: the
session storing a call's response (``until_stored``, ``responses_stored``), a live
event (``live_until``). The scenarios themselves are ``library``; their tools
``tools``."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.adk.apps import App
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from .. import adk_compat as compat
from .probe import Probe

APP_NAME = "scenarios"
USER_ID = "user"


@dataclass
class ScenarioRun:
    """What happened when a scenario ran."""

    name: str
    probe: Probe
    error: BaseException | None = None
    events: list[Any] = field(default_factory=list)
    #: (runner, session id) of each session the scenario used: what the session
    #: service stored is the ground truth of which calls got a response.
    sessions: list[tuple[Runner, str]] = field(default_factory=list)

    async def stored_events(self) -> list[Any]:
        """Every event the session services kept, across the scenario's sessions."""
        out: list[Any] = []
        for runner, sid in self.sessions:
            session = await runner.session_service.get_session(
                app_name=APP_NAME, user_id=USER_ID, session_id=sid)
            out.extend(session.events if session is not None else ())
        return out


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    mode: str  # "async" or "live"
    body: Callable[[Harness], Awaitable[None]]
    #: Part of the ADK audit corpus. False for scenarios whose leak is the
    #: application's own (a tool that ignores cancellation or spawns tasks), which
    #: would orphan on every ADK version.
    audit: bool = True
    #: Whether the installed ADK has what the scenario needs (see adk_compat).
    available: Callable[[], bool] = lambda: True


class Harness:
    """Builds App + Runner with the given plugins and runs one scenario on it."""

    def __init__(self, plugins: Sequence[BasePlugin], probe: Probe, run: ScenarioRun) -> None:
        self.plugins = list(plugins)
        self.probe = probe
        self.run = run
        self.runners: list[Runner] = []

    def runner(self, agent: LlmAgent) -> Runner:
        app = App(name=APP_NAME, root_agent=agent, plugins=self.plugins)
        runner = Runner(app=app, session_service=InMemorySessionService())
        self.runners.append(runner)
        return runner

    async def _session(self, runner: Runner) -> str:
        session = await runner.session_service.create_session(app_name=APP_NAME, user_id=USER_ID)
        self.run.sessions.append((runner, str(session.id)))
        return str(session.id)

    async def run_async(self, agent: LlmAgent, message: str = "go",
                        **kwargs: Any) -> None:
        runner = self.runner(agent)
        sid = await self._session(runner)
        content = types.Content(role="user", parts=[types.Part(text=message)])
        async with contextlib.aclosing(
            runner.run_async(user_id=USER_ID, session_id=sid, new_message=content, **kwargs)
        ) as agen:
            async for event in agen:
                self.run.events.append(event)

    @contextlib.asynccontextmanager
    async def live(self, agent: LlmAgent, **config_fields: Any
                   ) -> AsyncGenerator[AsyncGenerator[Any, None], None]:
        """A live run; leaving the block is the caller leaving (aclose)."""
        runner = self.runner(agent)
        sid = await self._session(runner)
        queue = LiveRequestQueue()
        config = RunConfig(streaming_mode=StreamingMode.BIDI,
                           response_modalities=[types.Modality.TEXT], **config_fields)
        agen = runner.run_live(
            user_id=USER_ID, session_id=sid, live_request_queue=queue, run_config=config)
        try:
            yield agen
        finally:
            if compat.LIVE_SEND_LOOP_POLLS and sys.version_info < (3, 12):
                # Else ADK's teardown may never end (adk_compat.LIVE_SEND_LOOP_POLLS):
                # closed first, the send loop stops by itself; the caller still leaves.
                queue.close()
            await agen.aclose()
            queue.close()

    async def until_stored(self, runner: Runner, sid: str, *calls: str,
                           responses: Sequence[str] = (), timeout: float = 15.0) -> None:
        """Waits until the session stores these function calls and responses."""
        async def stored() -> bool:
            session = await runner.session_service.get_session(
                app_name=APP_NAME, user_id=USER_ID, session_id=sid)
            events = session.events if session is not None else []
            have = {fc.id for e in events for fc in e.get_function_calls()}
            answered = {fr.id for e in events for fr in e.get_function_responses()}
            return set(calls) <= have and set(responses) <= answered

        async def poll() -> None:
            while not await stored():
                await asyncio.sleep(0.005)
        await asyncio.wait_for(poll(), timeout)

    async def live_until(self, agen: AsyncGenerator[Any, None],
                         done: Callable[[], bool], timeout: float = 15.0) -> None:
        """Consumes live events until ``done()`` holds."""
        async def consume() -> None:
            async for event in agen:
                self.run.events.append(event)
                if done():
                    return
        await asyncio.wait_for(consume(), timeout)

    async def live_while(self, agen: AsyncGenerator[Any, None], waiting: Awaitable[Any],
                         timeout: float) -> None:
        """Consumes live events (so that ADK goes on) until ``waiting`` is done, then
        stops consuming."""
        consumer = asyncio.ensure_future(self.live_until(agen, lambda: False, timeout))
        try:
            await waiting
        finally:
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)

    async def close(self) -> None:
        for runner in self.runners:
            with contextlib.suppress(Exception):
                await runner.close()


def responses_stored(run: ScenarioRun, *call_ids: str) -> Callable[[], bool]:
    want = set(call_ids)

    def done() -> bool:
        seen = {
            p.function_response.id
            for e in run.events if e.content and e.content.parts
            for p in e.content.parts if p.function_response is not None
        }
        return want <= seen
    return done


