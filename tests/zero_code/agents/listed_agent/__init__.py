from . import agent  # noqa: F401  (ADK's agent loader imports the package)
