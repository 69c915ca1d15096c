"""A task on a schedule every second (croniter's sixth field is seconds), catching up missed ticks.

The multi-process schedule proofs run this app in several worker processes at
once and check the ScheduleFired events: one run per tick, none lost while
every worker was down, none doubled.
"""

from __future__ import annotations

import tidegate

EVERY = 1.0  # seconds between ticks
CRON = "* * * * * *"


def make_app(database: str | None = None) -> tidegate.App:
    app = tidegate.App(database)

    @app.task(name="scheduled.beat", queue="scheduled")
    def beat(label: str) -> str:
        return label

    app.schedule(beat, cron=CRON, args={"label": "beat"}, name="beat", missed="catch_up")
    return app


app = make_app()
