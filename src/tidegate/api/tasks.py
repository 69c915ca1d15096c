"""`GET /api/v1/tasks`: the registered tasks, their parameters, the limits their runs meet, their last worker.

The same views `tidegate tasks list` prints (`engine.operators.tasks.task_views`): the
parameters every submit by name is checked against and the limits asked of
the rules a claim applies, never worked out again here.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from tidegate.api import verb_schemas as schemas
from tidegate.api.errors import blame
from tidegate.api.routing import ERRORS, PREFIX, declared_store
from tidegate.api.security import can_read
from tidegate.domain import names
from tidegate.engine.operators.tasks import task_views

router = APIRouter(prefix=PREFIX, tags=["tasks"])


@router.get(
    "/tasks", response_model=schemas.TaskList, responses=ERRORS, dependencies=[can_read],
    summary="Registered tasks: queue, parameters, the limits their runs meet, last worker",
)  # fmt: skip
def list_tasks(
    request: Request,
    queue: Annotated[str | None, Query(max_length=200, description="Only this queue's tasks.")] = None,
) -> dict[str, Any]:
    with blame("queue"):
        queue = None if queue is None else names.check_name("queue", queue)
    return {"tasks": [view.document() for view in task_views(declared_store(request), queue)]}
