"""Claims, limits, leases and sweeps through PgBouncer in transaction mode: the contracts, unchanged."""

from tests.contract.test_cycle_contract import *  # noqa: F403
from tests.contract.test_leases_contract import *  # noqa: F403
from tests.contract.test_limited_claims import *  # noqa: F403
from tests.contract.test_limits_contract import *  # noqa: F403
from tests.contract.test_sweeper import *  # noqa: F403
