"""A tag rate under load: what the worker processes of `tests/process/test_tag_rate_processes.py` run.

Two queues share one rate per tenant (`TENANT_LIMIT` starts per hour, all at
once: the hour's budget is one burst, and nothing refills during a test).
`ta` and `tb` are the same declarations with the task of one queue each, so a
worker of `tests.apps.tag_rates:ta` claims queue ta only and holds only its
claim turn: claimers of the two queues charge one tenant's state at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import tidegate
from tidegate import RunQueueConfig, TagRateLimit

TENANT_LIMIT = 2
QUEUES = ("ta", "tb")


def make_app(database: str | None = None, queues: Sequence[str] = QUEUES) -> tidegate.App:
    rate = TagRateLimit(key="tenant", per_unique_value=True, limit=TENANT_LIMIT, per="1h", burst=TENANT_LIMIT)
    app = tidegate.App(database, run_queue=RunQueueConfig(tag_rate_limits=[rate]))
    for queue in QUEUES:
        app.queue(queue)
    for queue in queues:
        app.task(name=f"tag_rates.{queue}", queue=queue)(_noop)
    return app


def _noop(n: int) -> int:
    return n


ta = make_app(queues=("ta",))
tb = make_app(queues=("tb",))
