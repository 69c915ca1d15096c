"""Submits, unique keys, children, pools, steps and wake-ups through PgBouncer in transaction mode."""

from tests.contract.test_children_contract import *  # noqa: F403
from tests.contract.test_pools_contract import *  # noqa: F403
from tests.contract.test_runs_contract import *  # noqa: F403
from tests.contract.test_steps_contract import *  # noqa: F403
from tests.contract.test_unique_contract import *  # noqa: F403
from tests.contract.test_wakeups_contract import *  # noqa: F403
