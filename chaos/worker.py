"""One chaos worker process: `python -m chaos.worker DATABASE --max-workers N [--skew SECONDS]`.

`--skew` shifts this process's wall clock (`time.time`, `time.time_ns`,
`datetime.now`/`utcnow`) before tidegate is imported, to show that nothing
depends on a worker's wall clock agreeing with the database's: time that
crosses processes must be the database's `now()`. The monotonic clock, which
the task logs use, is left alone.
"""

from __future__ import annotations

import argparse
import datetime as datetime_module
import logging
import sys
import time


def shift_wall_clock(seconds: float) -> None:
    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() + seconds
    time.time_ns = lambda: real_time_ns() + int(seconds * 1e9)
    real_datetime = datetime_module.datetime

    # Its now/utcnow return the real class's instances, not SkewedDatetime (hence the override ignores).
    class SkewedDatetime(datetime_module.datetime):
        @classmethod
        def now(cls, tz: datetime_module.tzinfo | None = None) -> datetime_module.datetime:  # type: ignore[override]
            return real_datetime.now(tz) + datetime_module.timedelta(seconds=seconds)

        @classmethod
        def utcnow(cls) -> datetime_module.datetime:  # type: ignore[override]
            return real_datetime.now(datetime_module.UTC).replace(tzinfo=None) + datetime_module.timedelta(
                seconds=seconds
            )

    datetime_module.datetime = SkewedDatetime  # type: ignore[misc]  # replacing a class is the point here


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("database")
    parser.add_argument("--max-workers", type=int, default=4)
    parser.add_argument("--skew", type=float, default=0.0)
    options = parser.parse_args(argv)
    if options.skew:
        shift_wall_clock(options.skew)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    # Imported after the clock is shifted: tidegate must see the skewed one.
    from chaos.apps import make_app

    make_app(options.database).worker(max_workers=options.max_workers).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
