"""`tidegate limits list|set|reset`: the run-level limits in force, and live changes to them.

A live limit (an override) persists in the database, wins over the code's
declaration until reset, and is versioned and audited (`LimitChanged`).
Targets are scope keys: `global`, `queue:NAME` (every partition of it),
`queue:NAME/PARTITION`, `tag:KEY=VALUE`, `tag:KEY` (every value of a
per-value tag limit), and a rate's window: `rate:QUEUE@PER` (every partition
of it), `rate:QUEUE/PARTITION@PER`, `rate:tag:KEY=VALUE@PER`, `rate:tag:KEY@PER`,
and a named rate's (`App.set_rate_limit`): `rate:@NAME@PER` (`@PER` may be left out when the
rate has one window). Validation and the dry-run preview are the engine's
(`engine.operators.limits`), so this module only parses and renders.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from tidegate.bootstrap import DEFAULT_DATABASE
from tidegate.cli.connect import existing_store
from tidegate.cli.options import Database, JsonOutput
from tidegate.cli.queues_view import queues_table
from tidegate.cli.render import print_json, short_time, stdout
from tidegate.cli.scopes import limit_text, usage_text
from tidegate.domain.limits import queue_to_dict
from tidegate.domain.live_rates import window_text
from tidegate.domain.model import LimitOverride
from tidegate.engine.operators import limits
from tidegate.engine.operators.limit_table import CeilingRow, LimitRow, limit_table, natural_key
from tidegate.engine.operators.limits import PREVIEW_RUNS, LimitPreview, parse_limit, preview, reset_limit, set_limit

app = typer.Typer(help="Show run-level limits; change them live (persisted until reset).", no_args_is_help=True)

TARGET_HELP = (
    "global, queue:NAME, queue:NAME/PARTITION, tag:KEY=VALUE or tag:KEY (every value); a rate's window: "
    "rate:QUEUE[/PARTITION]@PER, rate:tag:KEY[=VALUE]@PER or a named rate's rate:@NAME@PER "
    "(@PER optional for a rate of one window)."
)
Target = Annotated[str, typer.Argument(metavar="TARGET", help=TARGET_HELP)]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Show what the change would do; change nothing.")]


# Click reads an argument that starts with '-' as an option ("No such option: -1"); a command
# taking a number keeps unknown options as arguments, so `-1` reaches the LIMIT check above.
NUMBER_ARGUMENTS = {"ignore_unknown_options": True}


# --- list ----------------------------------------------------------------------------------------


@app.command("list")
def list_limits(database: Database = DEFAULT_DATABASE, json_output: JsonOutput = False) -> None:
    """Every limit in force, with the slots in use now and where each limit comes from; the
    admission ceilings (max_active) with the active runs each counts."""
    with existing_store(database) as store:
        table = limit_table(store)
    rules = table.rules
    if json_output:
        queues = [
            {"name": name, **queue_to_dict(config), "paused": rules.is_paused(name)}
            for name, config in sorted(rules.queues.items())
        ]
        print_json({"limits": table.limits, "ceilings": table.ceilings, "queues": queues, "overrides": table.overrides})
        return
    stdout.print(scopes_table(table.limits))
    if table.ceilings:
        stdout.print()
        stdout.print(ceilings_table(table.ceilings))
    if rules.queues:
        stdout.print()
        stdout.print(queues_table(rules))
    stdout.print()
    stdout.print(overrides_table(table.limits, table.overrides))


def scopes_table(rows: list[LimitRow]) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        title="limits in force",
        title_justify="left",
        title_style="bold",
        caption="in use: slots held now (a rate: cost units its window counts now) · change one: "
        "tidegate limits set TARGET LIMIT",
        caption_justify="left",
        caption_style="dim",
    )
    table.add_column("scope (TARGET)", no_wrap=True)  # a key to copy: never wrapped (set by folds instead)
    table.add_column("limit", justify="right", no_wrap=True)
    table.add_column("in use", justify="right", no_wrap=True)
    table.add_column("set by", overflow="fold", min_width=10, ratio=1)
    for row in rows:
        child = row.parent is not None
        scope = Text(("  " if child else "") + row.target, style="" if child else "bold")
        shown = limit_text(row.limit) + ("" if row.per is None else f"/{window_text(row.per)}")
        limit = Text(shown, style="dim" if row.limit is None else "")
        used = Text("") if row.used is None else usage_text(row.used, row.limit)
        table.add_row(scope, limit, used, _source(row))
    return table


def ceilings_table(ceilings: list[CeilingRow]) -> Table:
    title = "admission ceilings (max_active): a submit past one is refused"
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        title=title,
        title_justify="left",
        title_style="bold",
        min_width=len(title),
    )
    table.add_column("ceiling", no_wrap=True)
    table.add_column("active: queued + running + waiting", justify="right", no_wrap=True)
    for ceiling in ceilings:
        where = "all queues" if ceiling.queue is None else f"queue {ceiling.queue}"
        table.add_row(Text(where, style="bold"), usage_text(ceiling.active, ceiling.max_active))
    return table


def _source(row: LimitRow) -> Text:
    """`code`, or `live v3 (code: 2)` when an operator's override is in force."""
    text = Text()
    if row.live:
        text.append("live", style="bold magenta")
        text.append(f" v{'?' if row.version is None else row.version}, code: {limit_text(row.code_limit)}")
    elif row.declared:
        text.append(row.declared)
    if row.note:
        text.append((" · " if text else "") + row.note, style="dim")
    if row.burst is not None:
        text.append((" · " if text else "") + f"burst {row.burst}", style="dim")
    if row.adaptive:
        text.append((" · " if text else "") + row.adaptive, style="yellow")
    return text


def overrides_table(rows: list[LimitRow], overrides: list[LimitOverride]) -> Table | Text:
    """The live overrides, each beside the code's limit its row of the table shows."""
    if not overrides:
        return Text("no live overrides: the code's limits are in force", style="dim")
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        title="live overrides (win over the code until reset)",
        title_justify="left",
        title_style="bold",
        caption="remove one: tidegate limits reset TARGET",
        caption_justify="left",
        caption_style="dim",
    )
    table.add_column("target", no_wrap=True, style="magenta")
    table.add_column("limit", justify="right", no_wrap=True)
    table.add_column("code", justify="right", no_wrap=True)
    table.add_column("version", justify="right", no_wrap=True)
    table.add_column("updated", no_wrap=True)
    codes = {row.target: row.code_limit for row in rows}
    for override in sorted(overrides, key=lambda item: natural_key(item.target)):
        table.add_row(
            override.target,
            limit_text(override.limit),
            Text(limit_text(codes.get(override.target)), style="dim"),
            f"v{override.version}",
            short_time(override.updated_at),
        )
    return table


# --- set / reset -----------------------------------------------------------------------------------


@app.command("set", context_settings=NUMBER_ARGUMENTS)
def set_command(
    target: Target,
    limit: Annotated[
        str, typer.Argument(metavar="LIMIT", help="A whole number >= 1, or 'unlimited' (not for a rate).")
    ],
    dry_run: DryRun = False,
    database: Database = DEFAULT_DATABASE,
) -> None:
    """Set a live limit on TARGET (persisted, versioned, wins over the code until reset)."""
    value = parse_limit(limit)
    with existing_store(database) as store:
        if dry_run:
            result = preview(store, target, value)
        else:
            change = set_limit(store, target, value)
    if dry_run:
        _print_preview(result)
    else:
        stdout.print(
            Text.assemble(
                (change.target, "bold"),
                ": ",
                _arrow(change.old, change.new),
                (f"  (live override, version {change.version})", "dim"),
            )
        )


@app.command("reset")
def reset_command(target: Target, dry_run: DryRun = False, database: Database = DEFAULT_DATABASE) -> None:
    """Remove the live limit on TARGET: the code's limit is in force again."""
    with existing_store(database) as store:
        now = limits.target_now(store, target)
        target = now.target
        if not now.live:
            in_force = limit_text(now.limit)
            stdout.print(Text.assemble((target, "bold"), f": no live override to reset (limit in force: {in_force})"))
            return
        if dry_run:
            result = preview(store, target, None, reset=True)
        else:
            change = reset_limit(store, target)
    if dry_run:
        _print_preview(result)
        return
    stdout.print(
        Text.assemble(
            (change.target, "bold"),
            ": ",
            _arrow(change.old, change.new),
            ("  (live override removed: the code's limit is in force)", "dim"),
        )
    )


def _arrow(old: int | None, new: int | None) -> Text:
    return Text.assemble((limit_text(old), "dim"), " -> ", (limit_text(new), "bold green"))


def _print_preview(result: LimitPreview) -> None:
    stdout.print(
        Text.assemble(
            (result.target, "bold"), ": ", _arrow(result.old, result.new), ("  (dry run: nothing changed)", "yellow")
        )
    )
    if result.waiting is not None:
        steps = "step waits" if result.waiting == 1 else "steps wait"
        stdout.print(Text(f"{result.waiting} {steps} for this named rate now; a change wakes them (runs never pay it)"))
        return
    runs = "run" if result.unblocked == 1 else "runs"
    line = Text.assemble(
        "would unblock ",
        (str(result.unblocked), "bold green" if result.unblocked else "bold"),
        f" queued {runs} / hold back ",
        (str(result.blocked), "bold red" if result.blocked else "bold"),
    )
    looked = f" (of {result.considered} queued runs looked at"
    line.append(
        looked + (f", the first {PREVIEW_RUNS} in claim order)" if result.considered >= PREVIEW_RUNS else ")"),
        style="dim",
    )
    stdout.print(line)
    held = result.held
    if held is not None and result.new is not None and held > result.new:
        stdout.print(
            Text(
                f"{held} slots of {result.target} are held now, over the new limit: running runs are not "
                f"stopped; new runs wait until usage drops below {result.new}",
                style="dim",
            )
        )
