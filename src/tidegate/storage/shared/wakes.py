"""The wake-up a port verb owes, opened by the façade and sent at the verb's commit.

Every commit that could let a run in must wake the listeners after it commits:
`peek_cycle`, the worker's gate and the passing over of a worker's own wake-ups
all rest on it. Which verbs can is one table, `storage.port.WAKES`; the façade
(`storage/shared/facade.py`) enters a `Wake` around each of them, and each dialect
sends it in one place: PostgreSQL's transaction helpers queue the NOTIFY just
before their commit (so it is delivered at commit, in the same round trip),
SQLite's façade sends its datagrams after the verb returns. Nothing is sent
for a verb that made no commit.

A verb's own code only says what its commit let in when that is not
"something": `only_if(freed)` when it may have freed nothing, `named(worker)`
for a cycle whose own worker may pass the wake-up over, `sent_in_statement()`
when a PostgreSQL statement sends it itself (a one-statement submit).
"""

from __future__ import annotations

from contextvars import ContextVar, Token

EVERYONE = ""  # the payload every listener heeds; a worker id is passed over by that worker's own listener


class Wake:
    """What one call of a waking verb owes its listeners: NOTIFY payloads, sent once.

    Entered (`with Wake(verb) as wake:`) it is the current verb's wake-up while the verb runs.
    A plain class with slots, entered without a generator: every submit and every cycle opens one.
    """

    __slots__ = ("_token", "committed", "payloads", "verb")

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self.payloads = {EVERYONE}
        self.committed = False  # SQLite: a write transaction of the verb committed
        self._token: Token[Wake | None] | None = None

    def __enter__(self) -> Wake:
        self._token = _current.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _current.reset(self._token)

    def take(self) -> list[str]:
        """The payloads still owed (sorted, so the order of statements is fixed); owed no more after."""
        owed, self.payloads = sorted(self.payloads), set()
        return owed


_current: ContextVar[Wake | None] = ContextVar("tidegate_wake", default=None)


def owed() -> list[str]:
    """At a commit: the payloads the current verb owes (none outside a waking verb)."""
    wake = _current.get()
    return [] if wake is None else wake.take()


def committed() -> None:
    """SQLite: the current verb's write committed (its wake-up is sent once the verb returns)."""
    wake = _current.get()
    if wake is not None:
        wake.committed = True


def only_if(freed: object) -> None:
    """The current verb's commit lets a run in only if `freed`: owe nothing when it did not."""
    wake = _current.get()
    if wake is not None and not freed:
        wake.payloads.clear()


def named(worker: str) -> None:
    """A cycle's wake-up names its worker (or EVERYONE): that worker's own listener passes it over."""
    wake = _current.get()
    if wake is not None and wake.payloads:
        wake.payloads = {worker}


def everyone() -> None:
    """Owe every listener a wake-up too (a fill-order claim that took its whole limit)."""
    wake = _current.get()
    if wake is not None:
        wake.payloads.add(EVERYONE)


def sent_in_statement() -> None:
    """A PostgreSQL statement of the verb sends its wake-up itself (to save a statement)."""
    wake = _current.get()
    if wake is not None:
        wake.payloads.clear()
