"""An agent folder for ``adk api_server``: an App without TaskTelemetryPlugin."""

from google.adk.apps import App
from tests.zero_code.scripted import build_agent

app = App(name="parallel_agent", root_agent=build_agent())
