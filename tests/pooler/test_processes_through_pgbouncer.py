"""Worker processes through PgBouncer in transaction mode: every limit still holds, each run once.

The multi-process proof of tests/process (four processes, 2,000 runs over
partition, tag and global limits), unchanged, on the pooled URL; the worker
processes inherit TIDEGATE_DATABASE_DIRECT, so their wake-ups listen directly.
"""

from tests.process.test_gates_processes import test_worker_processes_never_exceed_any_scope  # noqa: F401
