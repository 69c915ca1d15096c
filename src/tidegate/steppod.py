"""A workflow step inside a Kubernetes pod: `python -m tidegate.steppod --run ... --step ...`.

The pod of `Executor.kubernetes()` runs this. It is a composition root of its
own (it opens the store, as the worker does): the database URL comes from
$TIDEGATE_DATABASE, which the Job fills from the user's Secret. It imports
the workflow and the step's function by module path (nothing pickled crosses
the wire), rebuilds the run's DAG from the run's args and reads the step's
inputs from the checkpoints of the steps it depends on, runs the function,
and writes the output fenced on (run id, attempt) for this step only: a
running row holding {job, pod, output} (event StepOutputWritten, naming
the Job and pod), which the worker that launched the Job then records
completed, freeing or handing on the step's slots as for a local step.

Exit codes: 0 done, 1 the step raised (its traceback is the pod's log),
3 fenced out (the run was taken over, or this step is not this attempt's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from tidegate.bootstrap import DATABASE_ENV, Store, open_store
from tidegate.domain.jsonvalue import DEFAULT_MAX_PAYLOAD, ensure_payload
from tidegate.domain.steps import StepRecord, StepStatus
from tidegate.engine.runtime.pod_steps import checkpoints, run_of, write_output
from tidegate.workflow import Executor, WorkflowDefinition
from tidegate.workflow.builder import Dag, MapNode, StepNode, build_dag, resolve
from tidegate.workflow.kubernetes.spec import JOB_ENV, POD_ENV

FENCED_OUT = 3
START_RECORD_WAIT = 30.0  # seconds the pod waits for the worker's record that the step started


def load(path: str) -> Any:
    """Import `module:qualname`; a decorated step or workflow gives back its plain function."""
    module_name, _, qualname = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    definition = getattr(target, "workflow_definition", None)
    if isinstance(definition, WorkflowDefinition):
        return definition.fn
    return getattr(target, "__wrapped__", target)


def outputs_of(dag: Dag, records: Mapping[str, StepRecord]) -> dict[str, Any]:
    """The outputs the run has checkpointed, by node key (a map's: its items' outputs, once all are done)."""
    outputs: dict[str, Any] = {}
    for key, node in dag.nodes.items():
        if isinstance(node, StepNode):
            record = records.get(key)
            if record is not None and record.status is StepStatus.COMPLETED:
                outputs[key] = record.output
            continue
        items = sorted(
            (record for record in records.values() if record.map_key == key), key=lambda r: r.item_index or 0
        )
        if items and all(record.status is StepStatus.COMPLETED for record in items):
            outputs[key] = [record.output for record in items]
    return outputs


def inputs_of(dag: Dag, record: StepRecord, outputs: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The step's args and kwargs, as the worker would have passed them."""
    if record.map_key is None:
        node = dag.nodes[record.step_key]
        if not isinstance(node, StepNode):
            raise LookupError(f"{record.step_key} is not a step of this workflow")
        return tuple(resolve(node.args, outputs)), dict(resolve(node.kwargs, outputs))
    mapped = dag.nodes[record.map_key]
    if not isinstance(mapped, MapNode) or record.item_index is None:
        raise LookupError(f"{record.step_key} is not an item of map {record.map_key}")
    items = resolve(mapped.items, outputs)
    return (items[record.item_index],), dict(resolve(mapped.kwargs, outputs))


def _running_row(
    store: Store, run_id: str, step_key: str, attempt: int
) -> tuple[dict[str, StepRecord], StepRecord | None]:
    """The run's checkpoints and this step's row, once the worker's record of its start has landed
    (it is written while the Job is created, so a fast pod may look first)."""
    deadline = time.monotonic() + START_RECORD_WAIT
    while True:
        records = checkpoints(store, run_id)
        record = records.get(step_key)
        if (
            record is not None
            and record.attempt == attempt
            and record.status is StepStatus.RUNNING
            and record.started_at is not None  # the worker's StepStarted has landed: ours comes after it
        ):
            return records, record
        if (record is not None and record.attempt > attempt) or time.monotonic() > deadline:
            return records, None
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidegate.steppod")
    for option in ("--run", "--step", "--workflow", "--workflow-name", "--builder", "--function"):
        parser.add_argument(option, required=True)
    parser.add_argument("--attempt", type=int, required=True)
    options = parser.parse_args(argv)
    job, pod = os.environ.get(JOB_ENV, ""), os.environ.get(POD_ENV, "")
    url = os.environ.get(DATABASE_ENV)
    if not url:
        print(f"tidegate.steppod: {DATABASE_ENV} is not set (the Job reads it from the store Secret)", file=sys.stderr)
        return 2
    with contextlib.closing(open_store(url, migrate=False)) as store:
        fence = (options.run, options.attempt)
        run = run_of(store, options.run)
        records, record = _running_row(store, options.run, options.step, options.attempt)
        if run is None or record is None:
            print(
                f"tidegate.steppod: step {options.step} is not running for attempt {options.attempt}", file=sys.stderr
            )
            return FENCED_OUT
        definition = WorkflowDefinition(
            options.workflow_name, load(options.workflow), options.builder, Executor.in_process()
        )
        dag = build_dag(definition, run.args)
        args, kwargs = inputs_of(dag, record, outputs_of(dag, records))
        fn = load(options.function)
        value = asyncio.run(fn(*args, **kwargs)) if inspect.iscoroutinefunction(fn) else fn(*args, **kwargs)
        ensure_payload(value, f"step {options.step}: output", DEFAULT_MAX_PAYLOAD)
        if not write_output(store, fence, record, job, pod, value):
            print(f"tidegate.steppod: run {options.run} attempt {options.attempt} was taken over", file=sys.stderr)
            return FENCED_OUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
