"""Apps for `rate_limits.py`, built alike in the benchmark process and its worker processes.

- `rate_paced`: one budget of PACED_RATE starts per second (the drain the rate paces);
- `rate_waiting`: one start a minute, for a worker with nothing to do but wait for the next token;
- `rate_none` / `rate_loose`: no rate, and a rate that never binds (LOOSE starts per second);
- `rate_partitions` / `rate_one_partition`: PARTITIONS budgets of PARTITION_RATE each (by the arg `p`),
  against one budget of PARTITIONS x PARTITION_RATE: neither binds a drain, so the difference is
  what a claim pays for reading and writing many rate states.
"""

from __future__ import annotations

from collections.abc import Callable

import tidegate
from tidegate import Partition, Rate

PACED_RATE = 200
LOOSE = 1_000_000
PARTITIONS = 1000
PARTITION_RATE = 50


def rate_app(scenario: str, url: str) -> tidegate.App:
    app = tidegate.App(url)
    if scenario == "rate_paced":
        app.queue("rated", rate=Rate(limit=PACED_RATE, per="1s"))
    elif scenario == "rate_waiting":
        app.queue("rated", rate=Rate(limit=1, per="1m"))
    elif scenario == "rate_loose":
        app.queue("rated", rate=Rate(limit=LOOSE, per="1s"))
    elif scenario == "rate_partitions":
        app.queue("rated", rate=Rate(limit=PARTITION_RATE, per="1s"), rate_partition=Partition(by_args=["p"]))
    elif scenario == "rate_one_partition":
        app.queue("rated", rate=Rate(limit=PARTITIONS * PARTITION_RATE, per="1s"))
    else:
        app.queue("rated")  # rate_none

    @app.task(queue="rated", name="rated_noop")
    def rated_noop(p: int = 0) -> None:
        """Does nothing: measures the rate, not the task."""

    return app


RATE_SCENARIOS: dict[str, Callable[[str, str], tidegate.App]] = dict.fromkeys(
    ("rate_paced", "rate_waiting", "rate_none", "rate_loose", "rate_partitions", "rate_one_partition"), rate_app
)
