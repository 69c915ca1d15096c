"""`tidegate.testing`: test the code that submits and runs tasks, without a worker process.

Installing tidegate registers a pytest plugin (`tidegate.testing.plugin`) whose
fixtures are `tidegate_database`, `tidegate_app`, `tidegate_clock` and
`tidegate_drain`; the helpers below work with any App, in any test runner.
Importing this package never imports pytest (only the plugin module does), and
`import tidegate` never imports this package.
"""

from tidegate.testing.assertions import assert_blocked, assert_submitted, refute_submitted, submitted
from tidegate.testing.clock import ControlledClock
from tidegate.testing.databases import IsolatedApp, postgres_schema, sqlite_url
from tidegate.testing.drain import DEFAULT_CAP, DrainResult, DrainRunaway, drain
from tidegate.testing.inline import run_inline

__all__ = [
    "DEFAULT_CAP",
    "ControlledClock",
    "DrainResult",
    "DrainRunaway",
    "IsolatedApp",
    "assert_blocked",
    "assert_submitted",
    "drain",
    "postgres_schema",
    "refute_submitted",
    "run_inline",
    "sqlite_url",
    "submitted",
]
