"""`tidegate rates list|set|reset`: named rates, the windows in force and where they come from.

A named rate is declared in code (`App.set_rate_limit`) and paid by the steps
that name it (`@app.step(rates={...})`); `set` is a live override of the
code's windows, kept until `reset`, audited, like `tidegate pools set`.
Validation is the engine's (`engine.operators.rate_config`), as for the code.
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
from tidegate.cli.render import print_json, stdout
from tidegate.domain.named_rates import NamedRate, label
from tidegate.engine.operators import rate_config

app = typer.Typer(
    help="Show named rates (paid by steps with their pool slots); override one live, or reset it to the code's.",
    no_args_is_help=True,
)

RateName = Annotated[str, typer.Argument(metavar="RATE", help="The rate's name.")]


def source_text(rate: NamedRate) -> Text:
    """Where the windows in force come from: the code, or a live override (the code's beside it)."""
    if rate.source == "override":
        code = "none" if rate.declared is None else label(rate.declared)
        return Text(f"override (code: {code})", style="yellow")
    return Text(rate.source or "-")


@app.command("list")
def list_rates(database: Database = DEFAULT_DATABASE, json_output: JsonOutput = False) -> None:
    """Every named rate: its windows in force (limit/window, each must allow a start), where they come
    from, and the steps waiting for it now."""
    with existing_store(database) as store:
        rates = rate_config.list_rates(store)
    if json_output:
        print_json({"rates": [rate.document() for rate in rates]})
        return
    if not rates:
        stdout.print(Text("no named rates: declare one with app.set_rate_limit(NAME, LIMIT, per=...)", style="dim"))
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    table.add_column("rate", style="bold", no_wrap=True)
    table.add_column("windows", no_wrap=True)
    table.add_column("burst", justify="right", no_wrap=True)
    table.add_column("waiting", justify="right", no_wrap=True)
    table.add_column("source", overflow="fold")
    for rate in rates:
        burst = ", ".join(str(window.allowed_burst) for window in rate.rates)
        table.add_row(Text(rate.name), label(rate.rates), burst, str(rate.waiting), source_text(rate))
    stdout.print(table)


@app.command("set", context_settings={"ignore_unknown_options": True})  # `-1` is a LIMIT to check, not an option
def set_rate(
    rate: RateName,
    limit: Annotated[str, typer.Argument(metavar="LIMIT", help="Starts (cost units) at most in any window.")],
    per: Annotated[str, typer.Option("--per", metavar="DURATION", help="The window's length ('1s', '1m').")],
    burst: Annotated[
        str | None, typer.Option("--burst", metavar="N", help="Most starts at one instant (default: limit/20).")
    ] = None,
    create: Annotated[bool, typer.Option("--create", help="Create the rate if no code declared it.")] = False,
    database: Database = DEFAULT_DATABASE,
) -> None:
    """Override a rate's window, live: it wins over the code's until 'tidegate rates reset'; waiting steps
    are woken at once."""
    with existing_store(database) as store:
        if not create and rate_config.find_rate(store, rate) is None:
            names = ", ".join(each.name for each in rate_config.list_rates(store)) or "none yet"
            raise CommandError(f"no rate named {rate!r} (rates: {names}); to create it, add --create")
        changed = rate_config.change_rate_limit(
            store, rate, _whole(limit), per, None if burst is None else _whole(burst)
        )
    stdout.print(
        Text.assemble(
            "rate ",
            (changed.name, "bold"),
            f": {label(changed.rates)}",
            ("  (a live override: kept until 'tidegate rates reset')", "dim"),
        )
    )


@app.command("reset")
def reset(rate: RateName, database: Database = DEFAULT_DATABASE) -> None:
    """Drop a rate's live override: the windows the code declares are in force again."""
    with existing_store(database) as store:
        back = rate_config.reset_rate_limit(store, rate)
    if back is None:
        stdout.print(Text.assemble("rate ", (rate, "bold"), ": no windows declared in code; the rate is gone"))
        return
    stdout.print(Text.assemble("rate ", (back.name, "bold"), f": {label(back.rates)} from the code"))


def _whole(text: str) -> int | str:
    """A whole number as typed, else the text itself (the engine refuses it, naming the field)."""
    try:
        return int(text.strip())
    except ValueError:
        return text
