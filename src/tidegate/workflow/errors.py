"""Errors a workflow raises: misuse while building, and a step that failed for good.

Misuse (`WorkflowError`) is raised while the DAG is built, before any step
runs, so a wrong workflow fails its run at once with a message that says what
to change. `StepError` carries a failed step's own error text up to the run.
"""

from __future__ import annotations

import traceback

from tidegate.domain.errors import TidegateError

MAX_ERROR_CHARS = 8000


class WorkflowError(TidegateError):
    """A workflow or step is used in a way that cannot work (raised while building the DAG)."""


class StepError(TidegateError):
    """A step failed after its own retries; the run fails with this step's error."""

    def __init__(self, key: str, error: str) -> None:
        self.key = key
        self.error = error
        super().__init__(f"step {key} failed: {error}")


class SlotsLost(TidegateError):
    """A running step's pool slots were freed under it, or their lease was about to run out while
    renewals failed: it is stopped and fails."""


class WorkflowStopped(TidegateError):
    """The run was canceled: no step starts any more, and the run ends once its running steps have."""


def error_text(error: BaseException) -> str:
    """'Type: message' then the traceback (a process pool's includes the remote one), bounded
    so a huge one cannot bloat the store; a NUL is spelled out, so both stores keep the same text."""
    head = f"{type(error).__name__}: {error}"
    full = f"{head}\n\n{''.join(traceback.format_exception(error)).strip()}".replace("\x00", "\\x00")
    return full if len(full) <= MAX_ERROR_CHARS else full[: MAX_ERROR_CHARS - 3] + "..."
