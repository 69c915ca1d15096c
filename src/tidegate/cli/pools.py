"""`tidegate pools list|info|set`: pools, who holds their slots, and their limits.

Slots in use are the sum of the holder rows, read from the database, so what
these commands show is what every claimer judges by. A pool no one has
configured is unlimited and shown as such ("unconfigured"), never hidden.
Validation is the engine's (`engine.pool_config`), as for `App.set_pool_limit`.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from tidegate.cli.connect import existing_store
from tidegate.cli.errors import CommandError
from tidegate.cli.options import Database
from tidegate.cli.render import short_time, stdout
from tidegate.domain.durations import format_duration
from tidegate.domain.model import HolderRecord
from tidegate.domain.pools import check_pool_name
from tidegate.domain.steps import PoolStatus
from tidegate.domain.tunables import DEFAULT_POOL_LEASE
from tidegate.engine.pool_config import set_pool_limit
from tidegate.storage.urls import DEFAULT_DATABASE

app = typer.Typer(help="Show pools and their slot holders; set a pool's limit.", no_args_is_help=True)

UNCONFIGURED = "unconfigured"
PoolName = Annotated[str, typer.Argument(metavar="POOL", help="The pool's name.")]


def limit_text(pool: PoolStatus) -> Text:
    if pool.limit is None:
        return Text(UNCONFIGURED, style="yellow")
    return Text(str(pool.limit), style="red" if pool.limit == 0 else "")


def claimed_text(pool: PoolStatus) -> Text:
    if pool.limit is None:
        return Text(str(pool.claimed))
    full = pool.limit == 0 or pool.claimed >= pool.limit
    return Text(f"{pool.claimed}/{pool.limit}", style="bold yellow" if full else "")


def lease_text(pool: PoolStatus) -> str:
    return "-" if pool.lease_seconds is None else format_duration(pool.lease_seconds)


@app.command("list")
def list_pools(database: Database = DEFAULT_DATABASE) -> None:
    """Every pool: its limit, slots claimed, steps waiting for it, and its lease duration."""
    with existing_store(database) as store:
        pools = store.pools()
    if not pools:
        stdout.print(Text("no pools: set one with 'tidegate pools set POOL LIMIT'", style="dim"))
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    table.add_column("pool", style="bold", overflow="fold")
    table.add_column("limit", justify="right", no_wrap=True)
    table.add_column("claimed", justify="right", no_wrap=True)
    table.add_column("pending", justify="right", no_wrap=True)
    table.add_column("lease", justify="right", no_wrap=True)
    for pool in pools:
        table.add_row(Text(pool.name), limit_text(pool), claimed_text(pool), str(pool.pending), lease_text(pool))
    stdout.print(table)
    if any(pool.limit is None for pool in pools):
        stdout.print(Text("unconfigured pools are unlimited: give them a limit with 'tidegate pools set'", style="dim"))


@app.command("info")
def info(pool: PoolName, database: Database = DEFAULT_DATABASE) -> None:
    """One pool: its limit and usage, and every holder of its slots (run, step, slots, lease)."""
    check_pool_name(pool)  # a name no pool can have is refused before it reaches SQL
    with existing_store(database) as store:
        found = {status.name: status for status in store.pools()}
        holders = store.pool_holders(pool)
    status = found.get(pool)
    if status is None:
        known = ", ".join(sorted(found)) or "none yet"
        raise CommandError(f"no pool named {pool!r} (pools: {known})")
    stdout.print(header(status))
    if holders:
        stdout.print(holders_table(holders))
    else:
        stdout.print(Text("no step holds slots of this pool", style="dim"))


def header(pool: PoolStatus) -> Text:
    claimed = f"{pool.claimed}/{pool.limit}" if pool.limit is not None else f"{pool.claimed} (unlimited)"
    return Text.assemble(
        "Pool: ",
        (pool.name, "bold"),
        "   limit ",
        limit_text(pool),
        f"   lease {lease_text(pool)}   claimed ",
        claimed_text(pool) if pool.limit is not None else Text(claimed),
        f"   pending {pool.pending}",
    )


def holders_table(holders: list[HolderRecord]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    table.add_column("RUN", no_wrap=True, style="bold")
    table.add_column("STEP", overflow="fold")
    table.add_column("SLOTS", justify="right", no_wrap=True)
    table.add_column("CLAIMED", no_wrap=True)
    table.add_column("LEASE EXPIRES", no_wrap=True)
    for holder in holders:
        table.add_row(
            holder.run_id,
            Text(holder.step_key or "-"),
            str(holder.slots),
            short_time(holder.claimed_at),
            short_time(holder.expires_at),
        )
    return table


@app.command("set")
def set_limit(
    pool: PoolName,
    limit: Annotated[str, typer.Argument(metavar="LIMIT", help="Slots at most in use at once (0 pauses the pool).")],
    lease_duration: Annotated[
        str, typer.Option("--lease-duration", metavar="DURATION", help="How long a claim lasts unless renewed.")
    ] = DEFAULT_POOL_LEASE,
    database: Database = DEFAULT_DATABASE,
) -> None:
    """Create a pool or change its limit and lease, live: waiting steps are woken at once."""
    try:
        slots = int(limit.strip())
    except ValueError:
        raise CommandError(f"LIMIT {limit!r} is not valid: use a whole number >= 0") from None
    with existing_store(database) as store:
        before = {status.name: status for status in store.pools()}.get(pool)
        config = set_pool_limit(store, pool, slots, lease_duration)
    was = "" if before is None or before.limit is None else f" (was {before.limit})"
    stdout.print(
        Text.assemble(
            "pool ",
            (config.name, "bold"),
            f": limit {config.limit}{was}, lease {format_duration(config.lease_seconds)}",
        )
    )
