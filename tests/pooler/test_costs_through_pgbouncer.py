"""Round trips and statements through PgBouncer in transaction mode: the same counts as direct.

A pooled store keeps nothing in a server session, and it must pay nothing per transaction for
that either: no SET before a verb, no read of the clock's offset, no set-up statement that a
direct connection sends once per session. The direct suite's exact counts (a submit, each path
of a claim) run here unchanged, so one statement or one wait more on the pooled path fails."""

from tests.contract.test_claim_costs import *  # noqa: F403
from tests.contract.test_submit_round_trips import *  # noqa: F403
