"""Pure rules of step-level gates: names, weights, step keys and the all-or-none grant.

The adapters read usage and limits inside their transaction and ask
`decide_grant` whether a step may take its slots, so the rule exists once,
is property-tested without a database, and is the same on both dialects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tidegate.domain.errors import InvalidArgument, PoolRequestTooLarge
from tidegate.domain.integers import check_whole
from tidegate.domain.names import check_name
from tidegate.domain.steps import FANOUT_PREFIX, POOL_PREFIX, ScopeUse

# Lease of the slots of a pool that was never configured (it is unlimited, but
# its holders still expire so that a crash cannot pin them).
UNCONFIGURED_LEASE_SECONDS = 300.0

_STEP_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,199}(?:\[(?:0|[1-9][0-9]{0,9})\])?")


def check_pool_name(name: Any) -> str:
    return check_name("pool", name)


def check_pool_limit(limit: Any) -> int:
    """A pool limit: an int >= 0 (0 pauses the pool: its steps wait until it is raised)."""
    return check_whole("pool limit", limit, 0)


def check_slots(pool: str, slots: Any) -> int:
    return check_whole(f"pool {pool!r}: slots", slots, 1)


def pool_needs(pools: Mapping[str, int]) -> dict[str, int]:
    """Validated `{pool name: slots}` as `{scope key: slots}`, in key order."""
    if not isinstance(pools, Mapping):
        raise InvalidArgument(f"pools must be a dict of pool name to slots, got {type(pools).__name__}")
    needs = {pool_scope(check_pool_name(name)): check_slots(name, slots) for name, slots in pools.items()}
    return dict(sorted(needs.items()))


def pool_scope(name: str) -> str:
    return POOL_PREFIX + name


def fanout_scope(run_id: str, map_key: str) -> str:
    return f"{FANOUT_PREFIX}{run_id}/{map_key}"


def pool_of(scope: str) -> str | None:
    """The pool a scope key names, or None for another kind of scope."""
    return scope[len(POOL_PREFIX) :] if scope.startswith(POOL_PREFIX) else None


def step_key(name: str, index: int | None = None) -> str:
    """The stable key of a step (`name`) or of item `index` of a map (`name[3]`)."""
    key = name if index is None else f"{name}[{index}]"
    return check_step_key(key)


def check_step_key(key: Any) -> str:
    if not isinstance(key, str) or not _STEP_KEY.fullmatch(key):
        raise InvalidArgument(
            f"step key {key!r} is not valid: use 1-200 letters, digits, '_', '.', ':' or '-', "
            "optionally followed by an item index like '[3]'"
        )
    return key


def holder_key(run_id: str, key: str) -> str:
    """The holder of a step's slots: `RUN/STEPKEY` (run ids never contain '/')."""
    return f"{run_id}/{key}"


def check_request(needs: Mapping[str, int], limits: Mapping[str, int | None]) -> None:
    """Refuse at once a request no amount of waiting can satisfy.

    A limit of 0 is a paused pool, not a refusal: its steps wait for it to be raised.
    """
    for scope, slots in sorted(needs.items()):
        limit = limits.get(scope)
        if limit is not None and 0 < limit < slots:
            raise PoolRequestTooLarge(pool_of(scope) or scope, slots, limit)


def decide_grant(
    needs: Mapping[str, int],
    used: Mapping[str, int],
    limits: Mapping[str, int | None],
    held: Mapping[str, int],
) -> list[ScopeUse]:
    """The scopes that block this request, in key order; empty means grant all of them.

    `used` is the sum of every live holder of each scope, this holder's own
    included (`held`), which is subtracted: re-asking for what one holds is a
    grant (idempotent). A scope whose limit is None is unlimited. All or none:
    one full scope blocks the whole request.
    """
    blocking = []
    for scope, slots in sorted(needs.items()):
        limit = limits.get(scope)
        if limit is None:
            continue
        others = used.get(scope, 0) - held.get(scope, 0)
        if others + slots > limit:
            blocking.append(ScopeUse(scope, others, limit))
    return blocking
