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


class ServerUnreachable(StoreUnavailable):
    """The database server did not answer, or hung up: unlike a file that cannot be opened, it may
    come back (a restart, a crash's recovery, a deploy that starts it beside its workers)."""


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


class RateNotFound(TidegateError, LookupError):
    """A step names a rate nobody declared (`App.set_rate_limit`): waiting could never satisfy it."""

    def __init__(self, rate: str) -> None:
        self.rate = rate
        super().__init__(
            f"rate {rate!r} is not declared: declare it with app.set_rate_limit({rate!r}, LIMIT, per=...) "
            f"or `tidegate rates set {rate} LIMIT --per ...`"
        )


class RateCostTooLarge(TidegateError, ValueError):
    """A step's cost of a named rate exceeds what one window lets start at once: it could never start."""

    def __init__(self, rate: str, cost: int, burst: int) -> None:
        self.rate, self.cost, self.burst = rate, cost, burst
        super().__init__(f"step costs {cost} of rate {rate!r}, whose burst is {burst}: it can never start")


class PoolClaimTimeout(TidegateError, TimeoutError):
    """A step waited TIDEGATE_CLAIM_TIMEOUT for its pool slots and gave up; `blocking` says why."""


class StepFencedOut(TidegateError):
    """This attempt no longer owns its run (it was taken over), so its step writes are refused."""


class RecursiveWaitDeadlock(TidegateError):
    """A chain of waits would release more slots of one scope than the scope's limit.

    The reference's bound (`domain/waits.py`): a chain of same-scope waits may lend
    that scope at most its limit of slots; the wait that would go past it fails at
    once in the triggering parent instead of hanging. `chain` runs root first, the
    refused parent last.
    """

    code = "RECURSIVE_WAIT_DEADLOCK"

    def __init__(self, scope: str, chain: tuple[str, ...], limit: int) -> None:
        self.scope, self.chain, self.limit = scope, tuple(chain), limit
        super().__init__(
            f"{self.code}: waiting here would release more slots of {scope} than its limit ({limit}) along the chain "
            f"{' -> '.join(self.chain)}; raise the limit of {scope} or put the child on another queue"
        )

    def __reduce__(self) -> tuple[type[RecursiveWaitDeadlock], tuple[str, tuple[str, ...], int]]:
        return type(self), (self.scope, self.chain, self.limit)


class WaitDeadlock(TidegateError):
    """A child could never be admitted: runs that resume only after it keep every slot of a scope it needs.

    Its own waiting ancestors (`domain/waits.py`, `chain` root first, the refused
    parent last) or a cycle of waits across chains (`domain/wait_graph.py`, `chain`
    from the refused parent around the cycle). The wait would hang for good, so it
    fails at once in the triggering parent instead; `holders` keep `scope`.
    """

    code = "WAIT_DEADLOCK"

    def __init__(self, scope: str, chain: tuple[str, ...], limit: int, holders: tuple[str, ...]) -> None:
        self.scope, self.chain, self.limit, self.holders = scope, tuple(chain), limit, tuple(holders)
        super().__init__(
            f"{self.code}: a child needs {scope} (limit {limit}) but every slot of it is kept by runs that "
            f"resume only after it ({', '.join(self.holders)}), along {' -> '.join(self.chain)}; "
            f"raise the limit of {scope}, put the child elsewhere, or let the keeping runs trigger with release='all'"
        )

    def __reduce__(self) -> tuple[type[WaitDeadlock], tuple[str, tuple[str, ...], int, tuple[str, ...]]]:
        return type(self), (self.scope, self.chain, self.limit, self.holders)


class WaitCycle(WaitDeadlock):
    """A parent would wait on a run that waits, itself or through others, on that parent.

    Only a unique child can close such a circle: a trigger whose child meets its key's holder
    waits on that holder (`domain/unique.py`), which may be the parent itself, one of its
    ancestors, or a run waiting on it across chains. No slot is at stake, so no scope is named;
    `chain` runs from the refused parent until a run repeats.
    """

    code = "WAIT_CYCLE"

    def __init__(self, chain: tuple[str, ...]) -> None:
        # not WaitDeadlock.__init__: that one words a scope's deadlock
        self.scope, self.chain, self.limit, self.holders = "", tuple(chain), 0, ()
        TidegateError.__init__(
            self,
            f"{self.code}: waiting here closes a circle of waits ({' -> '.join(self.chain)}): "
            "a unique child's key is held by a run that waits on this one; give the child another key",
        )

    def __reduce__(self) -> tuple[type[WaitCycle], tuple[tuple[str, ...]]]:  # type: ignore[override]
        return type(self), (self.chain,)


class NonDeterministicReplay(TidegateError):
    """A resumed parent asked, at one position of its triggers, for another task or other args
    than its earlier attempt did: replaying it would answer the wrong call (code
    `NON_DETERMINISTIC_REPLAY`). Triggers must come in the same order with the same args on
    every attempt; compute what varies inside a child, or before the first trigger, instead."""

    code = "NON_DETERMINISTIC_REPLAY"


class AttemptFencedOut(TidegateError):
    """This attempt no longer owns its run (it was rescued, handed back or ended), so the store
    refused its trigger: nothing was stored."""


class ScheduleNotFound(TidegateError, LookupError):
    """No schedule of that name is stored (pause, resume or remove of an unknown one)."""


class ArgumentMismatch(InvalidArgument):
    """A run's args do not fit its task's parameters (a name, a required one, a JSON type); nothing stored.

    `task` names the task, `argument` the first argument at fault, `problem` every problem found
    (the message is `TASK: PROBLEM; PROBLEM...`, one line).
    """

    def __init__(self, task: str, argument: str, problem: str) -> None:
        self.task = task
        self.argument = argument
        self.problem = problem
        super().__init__(f"{task}: {problem}")
