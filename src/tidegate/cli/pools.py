"""`tidegate pools list|info|set|reset`: pools, who holds their slots, and their limits.

Slots in use are the sum of the holder rows, read from the database, so what
these commands show is what every claimer judges by. A pool no one has
configured is unlimited and shown as such ("unconfigured"), never hidden, even
after its steps are done. `set` is a live override of the code's value
(`App.set_pool_limit`), kept until `reset`; `source` says which is in force.
Validation is the engine's (`engine.operators.pool_config`), as for `App.set_pool_limit`.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from tidegate.bootstrap import DEFAULT_DATABASE
from tidegate.cli.connect import existing_store
from tidegate.cli.errors import CommandError
from tidegate.cli.options import Database, JsonOutput
from tidegate.cli.render import print_json, short_time, stdout
from tidegate.domain.durations import format_duration
from tidegate.domain.model import HolderRecord
from tidegate.domain.steps import PoolStatus, PoolWaiter
from tidegate.domain.tunables import DEFAULT_POOL_LEASE
from tidegate.engine.operators import pool_config
from tidegate.engine.operators.pool_config import (
    change_pool,
    find_pool,
    parse_pool_limit,
    pool_holders,
    reset_pool_limit,
)

app = typer.Typer(
    help="Show pools and their slot holders; override a pool's limit live, or reset it to the code's.",
    no_args_is_help=True,
)

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


def source_text(pool: PoolStatus) -> Text:
    """Where the limit in force comes from: the code, or a live override (with the code's value beside it)."""
    if pool.source == "override":
        code = "none" if pool.declared_limit is None else str(pool.declared_limit)
        return Text(f"override (code: {code})", style="yellow")
    return Text(pool.source or "-", style="" if pool.source else "dim")


@app.command("list")
def list_pools(database: Database = DEFAULT_DATABASE, json_output: JsonOutput = False) -> None:
    """Every pool a step asked for or someone configured: the limit in force and where it comes from,
    slots claimed, steps waiting for it, and its lease duration."""
    with existing_store(database) as store:
        pools = pool_config.list_pools(store)
    if json_output:
        print_json({"pools": [pool.document() for pool in pools]})
        return
    if not pools:
        stdout.print(Text("no pools: set one with 'tidegate pools set POOL LIMIT --create'", style="dim"))
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    table.add_column("pool", style="bold", no_wrap=True)  # an identifier: never wrapped
    table.add_column("limit", justify="right", no_wrap=True)
    table.add_column("claimed", justify="right", no_wrap=True)
    table.add_column("pending", justify="right", no_wrap=True)
    table.add_column("lease", justify="right", no_wrap=True)
    table.add_column("source", overflow="fold")
    for pool in pools:
        table.add_row(
            Text(pool.name),
            limit_text(pool),
            claimed_text(pool),
            str(pool.pending),
            lease_text(pool),
            source_text(pool),
        )
    stdout.print(table)
    if any(pool.limit is None for pool in pools):
        stdout.print(Text("unconfigured pools are unlimited: give them a limit with 'tidegate pools set'", style="dim"))


@app.command("info")
def info(pool: PoolName, database: Database = DEFAULT_DATABASE, json_output: JsonOutput = False) -> None:
    """One pool: its limit and usage, and every holder of its slots (run, step, slots, lease)."""
    with existing_store(database) as store:
        status = find_pool(store, pool)  # a name no pool can have is refused before it reaches SQL
        holders = pool_holders(store, pool) if status is not None else []
        waiting = pool_config.pool_waiters(store, pool) if status is not None else []
        known = ", ".join(sorted(each.name for each in pool_config.list_pools(store))) or "none yet"
    if status is None:
        raise CommandError(f"no pool named {pool!r} (pools: {known})")
    if json_output:
        documents = {"holders": [holder.document() for holder in holders], "waiting": [w.document() for w in waiting]}
        print_json({**status.document(), **documents})
        return
    stdout.print(header(status))
    if holders:
        stdout.print(holders_table(holders))
    else:
        stdout.print(Text("no step holds slots of this pool", style="dim"))
    if waiting:
        stdout.print(waiting_table(waiting))


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
        *(("   source ", source_text(pool)) if pool.source == "override" else ()),
    )


def waiting_table(waiting: list[PoolWaiter]) -> Table:
    """The steps the header's `pending` counts: what each asks and since when it waits."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0), title="waiting for slots")
    table.add_column("RUN", no_wrap=True, style="bold")
    table.add_column("STEP", no_wrap=True)
    table.add_column("SLOTS", justify="right", no_wrap=True)
    table.add_column("WAITING SINCE", no_wrap=True)
    for waiter in waiting:
        since = "-" if waiter.since is None else short_time(waiter.since)
        table.add_row(waiter.run_id, Text(waiter.step_key), str(waiter.slots), since)
    return table


def holders_table(holders: list[HolderRecord]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    table.add_column("RUN", no_wrap=True, style="bold")
    table.add_column("STEP", no_wrap=True)
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


@app.command("set", context_settings={"ignore_unknown_options": True})  # `-1` is a LIMIT to check, not an option
def set_limit(
    pool: PoolName,
    limit: Annotated[str, typer.Argument(metavar="LIMIT", help="Slots at most in use at once (0 pauses the pool).")],
    lease_duration: Annotated[
        str | None,
        typer.Option(
            "--lease-duration",
            metavar="DURATION",
            help=f"How long a claim lasts unless renewed (default: the pool's own, else {DEFAULT_POOL_LEASE}).",
        ),
    ] = None,
    create: Annotated[
        bool, typer.Option("--create", help="Create the pool if no code declared it and no step asked for it.")
    ] = False,
    database: Database = DEFAULT_DATABASE,
) -> None:
    """Override a pool's limit (and lease), live: it wins over the code's value until 'tidegate pools reset';
    waiting steps are woken at once."""
    slots = parse_pool_limit(limit)
    with existing_store(database) as store:
        if not create and find_pool(store, pool) is None:
            names = ", ".join(sorted(status.name for status in pool_config.list_pools(store))) or "none yet"
            raise CommandError(f"no pool named {pool!r} (pools: {names}); to create it, add --create")
        change = change_pool(store, pool, slots, lease_duration)  # no --lease-duration: the pool's own
    before, config = change.before, change.config
    was = "" if before is None or before.limit is None else f" (was {before.limit})"
    stdout.print(
        Text.assemble(
            "pool ",
            (config.name, "bold"),
            f": limit {config.limit}{was}, lease {format_duration(config.lease_seconds)}",
            ("  (a live override: kept until 'tidegate pools reset')", "dim"),
        )
    )


@app.command("reset")
def reset(pool: PoolName, database: Database = DEFAULT_DATABASE) -> None:
    """Drop a pool's live override: the limit the code declares is in force again (none: unconfigured)."""
    with existing_store(database) as store:
        config = reset_pool_limit(store, pool)
    if config is None:
        stdout.print(Text.assemble("pool ", (pool, "bold"), ": no limit declared in code, unconfigured (unlimited)"))
        return
    stdout.print(
        Text.assemble(
            "pool ",
            (config.name, "bold"),
            f": limit {config.limit} from the code, lease {format_duration(config.lease_seconds)}",
        )
    )
