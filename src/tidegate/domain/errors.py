"""The exceptions a user of tidegate can catch.

They live in the domain so that every layer raises the same types; the CLI
turns any `TidegateError` into one readable line.
"""

from __future__ import annotations


class TidegateError(Exception):
    """Base class: a failure tidegate can explain in one line."""


class ConfigurationError(TidegateError, ValueError):
    """A setting, URL, duration or declaration is malformed."""


class InvalidArgument(TidegateError, ValueError):
    """Input to submit (args, options) is not acceptable; nothing was stored."""


class AdmissionRejected(TidegateError):
    """Submit refused: the backlog reached its ceiling. Nothing was stored; retry after `retry_after` s."""

    def __init__(self, scope: str, active: int, limit: int, retry_after: int) -> None:
        self.scope = scope
        self.active = active
        self.limit = limit
        self.retry_after = retry_after
        super().__init__(
            f"admission ceiling reached for {scope}: {active} active runs of {limit}; retry after {retry_after}s"
        )


class UnknownTask(TidegateError, LookupError):
    """A task name that no app has registered."""


class RunNotFound(TidegateError, LookupError):
    """No run with that id exists in the store."""


class RunNotRetryable(TidegateError):
    """Only a failed or canceled run may be retried; this one is in another status."""


class QueueNotFound(TidegateError, LookupError):
    """No queue of that name is declared (in code, or implied by a task)."""


class PoolNotFound(TidegateError, LookupError):
    """No pool of that name is configured, held or waited for."""


class SchemaError(TidegateError):
    """The database schema does not match this version of tidegate."""


class StoreUnavailable(TidegateError):
    """The database cannot be reached."""


class WaitTimeout(TidegateError, TimeoutError):
    """`RunHandle.wait` gave up before the run finished; the run goes on."""


class RunFailed(TidegateError):
    """The run ended failed; `error` carries the remote error text."""

    def __init__(self, run_id: str, error: str | None) -> None:
        self.run_id = run_id
        self.error = error or "unknown error"
        super().__init__(f"run {run_id} failed: {self.error}")


class RunCanceled(RunFailed):
    """The run ended canceled, so it has no result."""

    def __init__(self, run_id: str, error: str | None = None) -> None:
        super().__init__(run_id, error or "canceled")
        self.args = (f"run {run_id} was canceled",)

    def __str__(self) -> str:
        return f"run {self.run_id} was canceled"


class PoolRequestTooLarge(TidegateError, ValueError):
    """A step asks more slots of a pool than its limit: waiting could never satisfy it."""

    def __init__(self, pool: str, slots: int, limit: int) -> None:
        self.pool, self.slots, self.limit = pool, slots, limit
        super().__init__(f"step asks {slots} slots of pool {pool!r}, whose limit is {limit}: it can never run")


class PoolClaimTimeout(TidegateError, TimeoutError):
    """A step waited TIDEGATE_CLAIM_TIMEOUT for its pool slots and gave up; `blocking` says why."""


class StepFencedOut(TidegateError):
    """This attempt no longer owns its run (it was taken over), so its step writes are refused."""
