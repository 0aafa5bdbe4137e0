"""An agent folder for ``adk api_server``: an App that already lists TaskTelemetryPlugin."""

from google.adk.apps import App
from tests.zero_code.scripted import build_agent

from adk_task_telemetry import TaskTelemetryPlugin

app = App(name="listed_agent", root_agent=build_agent("listed_agent"),
          plugins=[TaskTelemetryPlugin()])
