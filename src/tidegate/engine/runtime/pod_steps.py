"""A Kubernetes step pod's way to the store: the run and its checkpoints it reads, the output it writes.

The pod (`tidegate.steppod`) is a composition root of its own; like the faces it uses no store
verb itself, so what it may read and write is said here, once. Its output is written fenced on
(run id, attempt) as the step's running row holding {job, pod, output} (event StepOutputWritten);
the worker that launched the Job reads it back (`pod_output`) and records the step completed.
"""

from __future__ import annotations

from typing import Any

from tidegate.domain.model import RunRecord
from tidegate.domain.steps import StepRecord, StepStatus, StepUpdate
from tidegate.storage.port import Fence, Store


def run_of(store: Store, run_id: str) -> RunRecord | None:
    """The run the pod's step belongs to, or None."""
    return store.get_run(run_id)


def checkpoints(store: Store, run_id: str) -> dict[str, StepRecord]:
    """The run's step rows by step key, as its checkpoints recorded them."""
    return {record.step_key: record for record in store.run_steps(run_id)}


def write_output(store: Store, fence: Fence, record: StepRecord, job: str, pod: str, value: Any) -> bool:
    """Write the step's output on its running row, naming the Job and pod; False if fenced out."""
    written = StepUpdate(
        record.step_key,
        StepStatus.RUNNING,
        record.map_key,
        record.item_index,
        output={"job": job, "pod": pod, "output": value},
        details={"job": job, "pod": pod},
    )
    return store.record_steps(fence, [written])


def pod_output(record: StepRecord, attempt: int, job: str) -> tuple[bool, Any]:
    """(True, output) if `record` holds what Job `job`'s pod wrote for `attempt`, else (False, None)."""
    written = record.output
    if (
        record.status is StepStatus.RUNNING
        and record.attempt == attempt
        and isinstance(written, dict)
        and written.get("job") == job
        and "output" in written
    ):
        return True, written["output"]
    return False, None
