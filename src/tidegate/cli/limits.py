"""`tidegate limits list|set|reset`: the run-level limits in force, and live changes to them.

A live limit (an override) persists in the database, wins over the code's
declaration until reset, and is versioned and audited (`LimitChanged`).
Targets are scope keys: `global`, `queue:NAME` (every partition of it),
`queue:NAME/PARTITION`, `tag:KEY=VALUE`, `tag:KEY` (every value of a
per-value tag limit). Validation and the dry-run preview are the engine's
(`engine.limits`), so this module only parses and renders.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from tidegate.cli.connect import existing_store
from tidegate.cli.errors import CommandError
from tidegate.cli.options import Database, JsonOutput
from tidegate.cli.queues_view import partition_text, queues_table
from tidegate.cli.render import print_json, short_time, stdout
from tidegate.cli.scopes import UNLIMITED, limit_text, natural_key, scope_limit, usage_text
from tidegate.domain.limits import QueueConfig, queue_to_dict
from tidegate.domain.model import LimitOverride
from tidegate.domain.scopes import GLOBAL, Rules, check_override_target, effective_limit
from tidegate.engine.limits import (
    PREVIEW_RUNS,
    LimitPreview,
    code_limit,
    limits_in_force,
    preview,
    reset_limit,
    set_limit,
)
from tidegate.storage.urls import DEFAULT_DATABASE

app = typer.Typer(help="Show run-level limits; change them live (persisted until reset).", no_args_is_help=True)

TARGET_HELP = "global, queue:NAME, queue:NAME/PARTITION, tag:KEY=VALUE or tag:KEY (every value)."
Target = Annotated[str, typer.Argument(metavar="TARGET", help=TARGET_HELP)]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Show what the change would do; change nothing.")]


def parse_limit(text: str) -> int | None:
    """A LIMIT argument: a whole number (checked >= 1 by the engine) or `unlimited`.

    On the command line `unlimited` is the one way to lift a limit: a negative number is
    refused with that hint (-1 means unlimited only in the Python config, as in the reference
    system), so a typo never lifts a cap silently."""
    cleaned = text.strip().lower()
    if cleaned == UNLIMITED:
        return None
    try:
        value = int(cleaned)
    except ValueError:
        raise CommandError(f"LIMIT {text!r} is not valid: use a whole number >= 1 or 'unlimited'") from None
    if value < 0:
        raise CommandError(f"LIMIT {text!r} is not valid: to lift the limit say 'unlimited'; else a whole number >= 1")
    return value


# Click reads an argument that starts with '-' as an option ("No such option: -1"); a command
# taking a number keeps unknown options as arguments, so `-1` reaches the LIMIT check above.
NUMBER_ARGUMENTS = {"ignore_unknown_options": True}


# --- list ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    scope: str
    limit: int | None
    used: int | None  # None: nothing to count on this row (a partitioned queue's default)
    source: Text
    child: bool = False


@app.command("list")
def list_limits(database: Database = DEFAULT_DATABASE, json_output: JsonOutput = False) -> None:
    """Every limit in force, with the slots in use now and where each limit comes from."""
    with existing_store(database) as store:
        rules = store.rules()
        usage = store.scope_usage()
        overrides = store.limit_overrides()
    if json_output:
        queues = [
            {"name": name, **queue_to_dict(config), "paused": rules.is_paused(name)}
            for name, config in sorted(rules.queues.items())
        ]
        print_json({"limits": limits_in_force(rules, usage), "queues": queues, "overrides": overrides})
        return
    stdout.print(scopes_table(rules, usage, overrides))
    if rules.queues:
        stdout.print()
        stdout.print(queues_table(rules))
    stdout.print()
    stdout.print(overrides_table(rules, overrides))


def scopes_table(rules: Rules, usage: Mapping[str, int], overrides: list[LimitOverride]) -> Table:
    versions = {override.target: override.version for override in overrides}
    rows = limit_rows(rules, usage, versions)
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        title="limits in force",
        title_justify="left",
        title_style="bold",
        caption="in use: slots held now · change one: tidegate limits set TARGET LIMIT",
        caption_justify="left",
        caption_style="dim",
    )
    table.add_column("scope (TARGET)", no_wrap=True)  # a key to copy: never wrapped (set by folds instead)
    table.add_column("limit", justify="right", no_wrap=True)
    table.add_column("in use", justify="right", no_wrap=True)
    table.add_column("set by", overflow="fold", min_width=10, ratio=1)
    for row in rows:
        scope = Text(("  " if row.child else "") + row.scope, style="" if row.child else "bold")
        limit = Text(limit_text(row.limit), style="dim" if row.limit is None else "")
        used = Text("") if row.used is None else usage_text(row.used, row.limit)
        table.add_row(scope, limit, used, row.source)
    return table


def limit_rows(rules: Rules, usage: Mapping[str, int], versions: Mapping[str, int]) -> list[Row]:
    """Global, then each queue and its partitions, then tag limits, then anything else held."""
    rows = [
        Row(
            GLOBAL,
            rules.global_limit(),
            usage.get(GLOBAL, 0),
            _source(rules, GLOBAL, versions, "code", "max_concurrent_runs"),
        )
    ]
    for name in sorted(rules.queues, key=natural_key):
        rows.extend(_queue_rows(rules, rules.queues[name], usage, versions))
    rows.extend(_tag_rows(rules, usage, versions))
    shown = {row.scope for row in rows}
    for scope in sorted(set(usage) - shown, key=natural_key):
        note = Text("held, but no limit is declared for it now", style="dim")
        rows.append(Row(scope, scope_limit(rules, scope), usage[scope], note))
    return rows


def _queue_rows(rules: Rules, config: QueueConfig, usage: Mapping[str, int], versions: Mapping[str, int]) -> list[Row]:
    name = config.name
    concurrency = config.concurrency
    parent = f"queue:{name}"
    prefix = parent + "/"
    partitions = set(concurrency.overrides or {})
    partitions |= {target[len(prefix) :] for target in rules.overrides if target.startswith(prefix)}
    partitions |= {scope[len(prefix) :] for scope in usage if scope.startswith(prefix)}
    by = partition_text(config)
    limit = rules.queue_limit(name, "")
    code = "code" if concurrency.global_limit is not None else ""
    if by or partitions:
        note = f"each {by} partition" if by else "each concurrency key"
        rows = [Row(parent, limit, None, _source(rules, parent, versions, code, note))]
    else:
        rows = [Row(parent, limit, usage.get(parent, 0), _source(rules, parent, versions, code, ""))]
    for partition in sorted(partitions, key=natural_key):
        scope = f"{prefix}{partition}"
        code = "code override" if partition in (concurrency.overrides or {}) else ""
        source = _source(rules, scope, versions, code, "" if code else "queue's limit")
        rows.append(Row(scope, rules.queue_limit(name, partition), usage.get(scope, 0), source, child=True))
    return rows


def _tag_rows(rules: Rules, usage: Mapping[str, int], versions: Mapping[str, int]) -> list[Row]:
    rows: list[Row] = []
    covered: set[str] = set()
    for declared in rules.run_queue.tag_concurrency_limits:
        if declared.per_unique_value:
            parent = f"tag:{declared.key}"
            prefix = parent + "="
            rows.append(
                Row(
                    parent, effective_limit(rules, parent), None, _source(rules, parent, versions, "code", "each value")
                )
            )
            values = {scope for scope in usage if scope.startswith(prefix)}
            values |= {target for target in rules.overrides if target.startswith(prefix)}
            for scope in sorted(values, key=natural_key):
                key, _, value = scope[len("tag:") :].partition("=")
                live_parent = parent in rules.overrides and scope not in rules.overrides
                inherited = "per-value limit" + (f" (live {parent})" if live_parent else "")
                source = _source(rules, scope, versions, "", inherited)
                rows.append(Row(scope, rules.tag_limit(key, value), usage.get(scope, 0), source, child=True))
            covered |= {parent, *values}
        elif declared.value is not None:
            scope = f"tag:{declared.key}={declared.value}"
            if scope in covered:
                continue
            rows.append(
                Row(
                    scope,
                    rules.tag_limit(declared.key, declared.value),
                    usage.get(scope, 0),
                    _source(rules, scope, versions, "code", ""),
                )
            )
            covered.add(scope)
    for target in sorted(rules.overrides, key=natural_key):
        if not target.startswith("tag:") or target in covered:
            continue
        key, equals, value = target[len("tag:") :].partition("=")
        if equals:
            rows.append(
                Row(target, rules.tag_limit(key, value), usage.get(target, 0), _source(rules, target, versions, "", ""))
            )
        else:
            rows.append(
                Row(
                    target,
                    rules.overrides[target],
                    None,
                    _source(rules, target, versions, "", f"each value of tag {key}"),
                )
            )
    return rows


def _source(rules: Rules, target: str, versions: Mapping[str, int], code: str, note: str) -> Text:
    """`code`, or `live v3 (code: 2)` when an operator's override is in force."""
    text = Text()
    if target in rules.overrides:
        text.append("live", style="bold magenta")
        text.append(f" v{versions.get(target, '?')}, code: {limit_text(code_limit(rules, target))}")
    elif code:
        text.append(code)
    if note:
        text.append((" · " if text else "") + note, style="dim")
    return text


def overrides_table(rules: Rules, overrides: list[LimitOverride]) -> Table | Text:
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
    for override in sorted(overrides, key=lambda item: natural_key(item.target)):
        table.add_row(
            override.target,
            limit_text(override.limit),
            Text(limit_text(code_limit(rules, override.target)), style="dim"),
            f"v{override.version}",
            short_time(override.updated_at),
        )
    return table


# --- set / reset -----------------------------------------------------------------------------------


@app.command("set", context_settings=NUMBER_ARGUMENTS)
def set_command(
    target: Target,
    limit: Annotated[str, typer.Argument(metavar="LIMIT", help="A whole number >= 1, or 'unlimited'.")],
    dry_run: DryRun = False,
    database: Database = DEFAULT_DATABASE,
) -> None:
    """Set a live limit on TARGET (persisted, versioned, wins over the code until reset)."""
    value = parse_limit(limit)
    with existing_store(database) as store:
        if dry_run:
            result = preview(store, target, value)
            usage = store.scope_usage()
        else:
            change = set_limit(store, target, value)
    if dry_run:
        _print_preview(result, usage)
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
        rules = store.rules()
        target = check_override_target(target, rules)
        if target not in rules.overrides:
            in_force = limit_text(effective_limit(rules, target))
            stdout.print(Text.assemble((target, "bold"), f": no live override to reset (limit in force: {in_force})"))
            return
        if dry_run:
            result = preview(store, target, None, reset=True)
            usage = store.scope_usage()
        else:
            change = reset_limit(store, target)
    if dry_run:
        _print_preview(result, usage)
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


def _print_preview(result: LimitPreview, usage: Mapping[str, int]) -> None:
    stdout.print(
        Text.assemble(
            (result.target, "bold"), ": ", _arrow(result.old, result.new), ("  (dry run: nothing changed)", "yellow")
        )
    )
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
    held = usage.get(result.target)
    if held is not None and result.new is not None and held > result.new:
        stdout.print(
            Text(
                f"{held} slots of {result.target} are held now, over the new limit: running runs are not "
                f"stopped; new runs wait until usage drops below {result.new}",
                style="dim",
            )
        )
