"""Claims, limits, leases and sweeps through PgBouncer in transaction mode: the contracts, unchanged.

One module per aggregate: the cycle's and the limits' contracts take the claim's paths (free and
limited) through the pooler; test_limited_claims.py, which pins the limited claim's round trips and
races, runs on PostgreSQL directly (tests/contract)."""

from tests.contract.test_cycle_contract import *  # noqa: F403
from tests.contract.test_leases_contract import *  # noqa: F403
from tests.contract.test_limits_contract import *  # noqa: F403
from tests.contract.test_sweeper import *  # noqa: F403
