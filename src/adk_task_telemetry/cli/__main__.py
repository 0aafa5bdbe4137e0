"""``python -m adk_task_telemetry.cli``: the same as the ``adk-task-telemetry`` command."""

import sys

from .dispatch import main

sys.exit(main())
