"""A tag rate across worker processes: claimers of different queues (each holding only its own
queue's claim turn) never start more of a tenant than its rate allows, together.

PostgreSQL: 4 processes; SQLite: 2; half serve queue ta, half tb. They start
idle; then every tenant gets runs in both queues at once, many more than its
hour's budget, so each tenant's first charge is raced by claimers of both
queues. The workers claim until the budgets are spent and go on claiming a
while (every claim must now be refused), then are stopped. Exactly the budget
of each tenant started (completed, or running when the workers were killed):
more would be a double charge, fewer a lost one.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.apps import tag_rates
from tidegate import RunStatus

from .conftest import wait_until

pytestmark = pytest.mark.slow

TENANTS = 30
PER_TENANT_AND_QUEUE = 4
PROCESSES = {"postgres": 4, "sqlite": 2}
SETTLE = 2.0  # seconds the workers go on claiming once the budgets are spent: several of their polls


def test_processes_of_two_queues_start_exactly_each_tenants_budget(database_url, worker_processes):
    kind = "sqlite" if database_url.startswith("sqlite") else "postgres"
    app = tag_rates.make_app(database_url)
    try:
        for index in range(PROCESSES[kind]):
            queue = tag_rates.QUEUES[index % 2]
            worker_processes.spawn(f"tests.apps.tag_rates:{queue}", database_url, max_workers=8)
        wait_until(lambda: len(app.store.list_workers()) == PROCESSES[kind], timeout=60, message="workers up")
        tenant_of: dict[str, str] = {}
        for queue in tag_rates.QUEUES:
            task = app.tasks[f"tag_rates.{queue}"]
            for tenant in range(TENANTS):
                tags = {"tenant": f"t{tenant}"}
                for handle in task.options(tags=tags).submit_many([{"n": n} for n in range(PER_TENANT_AND_QUEUE)]):
                    tenant_of[handle.id] = f"t{tenant}"
        budget = TENANTS * tag_rates.TENANT_LIMIT

        def spent() -> bool:
            counts = app.store.status_counts()
            return not counts.get(RunStatus.RUNNING) and len(tenant_of) - counts.get(RunStatus.QUEUED, 0) >= budget

        wait_until(spent, timeout=120, interval=0.2, message="each tenant's budget started")
        time.sleep(SETTLE)  # a window for any claim that would take past the budget (none may)
        worker_processes.close()
        records = [app.store.get_run(run_id) for run_id in tenant_of]
        started = Counter(  # claimed at all: completed, or running when its worker was stopped
            tenant_of[run.id] for run in records if run is not None and run.status is not RunStatus.QUEUED
        )
        assert started == {f"t{tenant}": tag_rates.TENANT_LIMIT for tenant in range(TENANTS)}
    finally:
        app.close()
