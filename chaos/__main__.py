"""`python -m chaos [--short|--long] [--backend sqlite|postgres|both] [--seed N] [--scenario NAME]`.

Runs every scenario against SQLite (a temp file) and a private PostgreSQL
cluster (never the shared server: the suite restarts it and freezes its
backends), prints one aligned line of figures per scenario and exits 1 when
the history checker found any violation (each is printed below its line).
Scenarios that need a server (restart, a crash of the whole server, LISTEN
faults, clock skew) run on PostgreSQL only: SQLite has no server, and every
process on one host reads the same clock.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from chaos import scenarios
from chaos.cluster import private_cluster
from chaos.harness import Harness
from chaos.scenarios import Result

console = Console(stderr=True)


def run_backend(backend: str, mode_name: str, seed: int, folder: Path, only: Collection[str] = ()) -> list[Result]:
    """Every scenario of one backend (or those in `only`), each on a fresh database."""
    rng = random.Random(seed)
    mode = scenarios.SHORT if mode_name == "short" else scenarios.LONG[backend]
    results = []
    with ExitStack() as stack:
        cluster = stack.enter_context(private_cluster()) if backend == "postgres" else None
        counter = iter(range(1_000))

        @contextmanager
        def harness(name: str) -> Iterator[Harness]:
            # The LISTEN scenario polls rarely, so a wake-up that never comes shows in its pickup time.
            env = (
                {
                    "TIDEGATE_POLL_INTERVAL": scenarios.LISTEN_POLL,
                    "TIDEGATE_LISTEN_CHECK_INTERVAL": scenarios.LISTEN_CHECK,
                }
                if name == "listen"
                else None
            )
            if cluster is None:
                url = f"sqlite:///{folder}/{name}.db"
            else:
                url = f"{cluster.url}?options=-csearch_path%3D{name}"
                _create_schema(cluster.url, name)
            opened = Harness(url, folder / f"{backend}-{name}-{next(counter)}", env)
            try:
                yield opened
            finally:
                opened.close()

        with Progress(console=console, transient=True) as progress:

            def storm(opened: Harness) -> Result:
                bar = progress.add_task(f"{backend} storm: kills", total=mode.storm_kills)
                return scenarios.storm(opened, rng, mode, lambda done, total: progress.update(bar, completed=done))

            plan: list[tuple[str, Callable[[Harness], Result]]] = [
                ("storm", storm),
                ("poison", lambda h: scenarios.poison(h, rng)),
                ("zombie", lambda h: scenarios.zombie(h, rng)),
            ]
            if cluster is not None:
                plan += [
                    ("restart", lambda h: scenarios.restart(h, rng, cluster, mode.outage)),
                    ("crash", lambda h: scenarios.crash(h, rng, cluster, mode.crashes)),
                    ("listen", lambda h: scenarios.listen(h, rng, cluster)),
                    ("skew", lambda h: scenarios.skew(h, rng)),
                ]
            for name, scenario in plan:
                if only and name not in only:
                    continue
                task = progress.add_task(f"{backend} {name}", total=None)
                with harness(name) as opened:
                    results.append(scenario(opened))
                progress.remove_task(task)
                report(backend, results[-1])
    return results


def _create_schema(url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(name)))


def report(backend: str, result: Result) -> None:
    figures = "  ".join(f"{key}={value!s:<6}" for key, value in result.figures.items())
    rules = Counter(violation.split(":")[0] for violation in result.violations)
    verdict = "[green]ok[/]" if not rules else "[red]" + ", ".join(f"{n} {rule}" for rule, n in rules.items()) + "[/]"
    console.print(f"{backend:<8} {result.name:<8} {figures}  {verdict}", highlight=False, soft_wrap=True)
    for violation in result.violations[:10]:
        console.print(f"    [red]![/] {violation}", highlight=False, soft_wrap=True)
    if len(result.violations) > 10:
        console.print(f"    ... and {len(result.violations) - 10} more", highlight=False, soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.splitlines()[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--short", dest="mode", action="store_const", const="short", default="short")
    length.add_argument("--long", dest="mode", action="store_const", const="long")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--scenario",
        action="append",
        default=[],
        help="run only this one (repeatable)",
        choices=["storm", "poison", "zombie", "restart", "crash", "listen", "skew"],
    )
    parser.add_argument("--keep", type=Path, default=None, help="write the logs here (default: a temp dir, removed)")
    options = parser.parse_args(argv)
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)  # the restart scenario drops connections on purpose
    seed = options.seed if options.seed is not None else random.randrange(1_000_000)
    console.print(f"chaos: {options.mode} mode, seed {seed}", highlight=False, soft_wrap=True)
    backends = ["sqlite", "postgres"] if options.backend == "both" else [options.backend]
    results = []
    with ExitStack() as stack:
        folder = options.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tidegate-chaos-")))
        for backend in backends:
            results += run_backend(backend, options.mode, seed, folder, options.scenario)
    failed = sum(bool(result.violations) for result in results)
    console.print(
        f"chaos: {len(results)} scenarios, {failed} with violations (seed {seed})", highlight=False, soft_wrap=True
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
