"""Showing scopes, limits and block reasons the same way everywhere.

`queue list`, `queue why`, `limits ...` and the demo's live view all name a
limit, show its usage and explain a blocked run; they share these helpers so
an operator reads one vocabulary: the scope key (`queue:api/customer_id=3`,
the same string `tidegate limits set` takes), `used/limit`, and the
sentences of `queue why`. Nothing here decides anything: limits come from
`Rules` (the claim's own view) and explanations from `engine.operators.why`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from tidegate.cli.render import short_time, status_text
from tidegate.domain import attempts
from tidegate.domain.blocking import Verdict, allowed_text, paused_text
from tidegate.domain.children import resume_rule
from tidegate.domain.durations import format_duration
from tidegate.domain.leases import stuck
from tidegate.domain.model import HolderRecord, RunRecord, RunStatus
from tidegate.domain.scopes import Rules, effective_limit
from tidegate.engine.operators.limits import UNLIMITED
from tidegate.engine.operators.why import Explanation, ScopeCheck, label_of

HOLDERS_SHOWN = 8  # `queue why` lists this many holders of a blocking scope, then "and N more"


def now_utc() -> datetime:
    return datetime.now(UTC)


def limit_text(limit: int | None) -> str:
    return UNLIMITED if limit is None else str(limit)


def scope_limit(rules: Rules, scope: str) -> int | None:
    """The limit in force for a scope key (`global`, `queue:q`, `queue:q/p`, `tag:k=v`); None: none."""
    return effective_limit(rules, scope)


def usage_text(used: int, limit: int | None) -> Text:
    """`3/4`; yellow when full (the limit is binding), red when over (a limit lowered live)."""
    if limit is None:
        return Text(str(used) if used else "-", style="dim" if not used else "")
    style = "bold red" if used > limit else ("yellow" if used >= limit else "")
    return Text(f"{used}/{limit}", style=style)


def slot_cells(used: int, limit: int, width: int = 24) -> Text:
    """One cell per slot (`████░░`), scaled down when the limit is wider than `width`."""
    if limit <= 0:
        return Text()
    if limit <= width:
        filled, total = min(used, limit), limit
    else:
        filled, total = round(min(used, limit) * width / limit), width
    style = "red" if used > limit else ("yellow" if used >= limit else "cyan")
    return Text.assemble(("█" * filled, style), ("░" * (total - filled), "grey37"))


def reason_text(reason: Sequence[dict[str, Any]] | None) -> str:
    """A RunBlocked event's recorded reason on one line: `queue:api/customer_id=3 2/2 · tag:tenant=acme 1/1`."""
    if not reason:
        return ""
    parts = []
    for item in reason:
        if isinstance(item, dict):
            per = f" per {format_duration(item['per'])}" if isinstance(item.get("per"), (int, float)) else ""
            parts.append(f"{item.get('scope', '?')} {item.get('used', '?')}/{item.get('limit', '?')}{per}")
        else:
            parts.append(str(item))
    return " · ".join(parts)


def verdict_text(found: Verdict) -> str:
    """Why a queued run waits now, on one line ("" when ready): `queue api is paused ·
    queue:api/customer_id=3 2/2`, the pause and the full scopes `queue why` names."""
    parts = [paused_text(found.queue)] if found.paused else []
    parts.extend(check.text() for check in found.blocking)
    return " · ".join(parts)


def age_text(seconds: float) -> str:
    """12s, 3m04s, 2h05m, 3d04h: how long something has waited, to a glance."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def waiting_seconds(run: RunRecord, now: datetime) -> float:
    """How long a queued run has been claimable: since it fell due (its submit, or its retry)."""
    return (now - run.scheduled_at).total_seconds()


# --- `queue why` ---------------------------------------------------------------------------------


def run_label(run: RunRecord) -> Text:
    return Text.assemble("Run ", (run.id, "bold"), " (", (run.task, "cyan"), ")")


def headline(explanation: Explanation, now: datetime) -> Text:
    """The first line of `queue why`: what the run is and where it stands."""
    run = explanation.run
    line = run_label(run)
    if explanation.waiting_for is not None:
        line.append(" is ")
        line.append_text(status_text(run.status))
        line.append(f" for {explanation.waiting_for}")
        return line
    if run.status is not RunStatus.QUEUED:
        line.append(" is ")
        line.append_text(status_text(run.status))
        line.append(", not queued: ")
        line.append(_not_queued_detail(run, now))
        return line
    line.append(" is ")
    line.append_text(status_text(run.status))
    position = f"position {explanation.position} of {explanation.queued_in_queue}" if explanation.position else ""
    line.append(f": {position} in queue {run.queue}, priority {run.priority}, ")
    due_in = -waiting_seconds(run, now)
    if due_in > 0:
        line.append(f"queued {age_text((now - run.submitted_at).total_seconds())} ago, due in {age_text(due_in)}")
    else:
        line.append(f"queued {age_text(waiting_seconds(run, now))} ago")
    return line


def _not_queued_detail(run: RunRecord, now: datetime) -> str:
    if run.status is RunStatus.RUNNING:
        since = f", started {age_text((now - run.started_at).total_seconds())} ago" if run.started_at else ""
        worker = f" on worker {run.worker_id}" if run.worker_id else ""
        cancel = " (cancel requested)" if run.cancel_requested else ""
        return f"attempt {attempts.describe(run.attempts)}{worker}{since}{cancel}"
    finished = f"finished {age_text((now - run.finished_at).total_seconds())} ago" if run.finished_at else "finished"
    if run.status is RunStatus.FAILED:
        return f"{finished} (details: tidegate runs show {run.id})"
    return finished


def check_text(check: ScopeCheck) -> Text:
    per = "" if check.rate is None or check.rate.per is None else f" per {format_duration(check.rate.per)}"
    return Text.assemble(check.label, " ", (f"{check.used}/{check.limit}{per}", ""), (" ok", "green"))


def checks_line(checks: Sequence[ScopeCheck]) -> Text:
    return Text(" · ").join(check_text(check) for check in checks)


def blocking_text(
    check: ScopeCheck, holders: Sequence[HolderRecord], max_holders: int = HOLDERS_SHOWN, now: datetime | None = None
) -> Text:
    """`queue api partition customer_id=3 — 2 of 2 slots held by 01H..., 01H...`; a holder whose lease
    expired (its worker stopped renewing: stuck until a sweep) is marked so."""
    if check.rate is not None and check.rate.per is not None:  # a rate has no holders: it says when
        used = f"{check.used} of {check.limit} per {format_duration(check.rate.per)} used"
        return Text.assemble((check.label, "bold yellow"), f" — {used}; {allowed_text(check.rate.allowed_in)}")
    slots = "slot" if check.limit == 1 else "slots"
    line = Text.assemble((check.label, "bold yellow"), f" — {check.used} of {check.limit} {slots} held")
    if not holders:
        return line
    line.append(" by ")
    shown = holders[:max_holders]
    for index, holder in enumerate(shown):
        line.append(", " if index else "")
        line.append(holder.holder + (f"×{holder.slots}" if holder.slots > 1 else ""))  # RUN or RUN/STEP
        if now is not None and stuck(True, holder.expires_at, now):
            line.append(" (stuck: lease expired, 'tidegate sweep' frees it)", style="bold red")
    if len(holders) > len(shown):
        line.append(f" and {len(holders) - len(shown)} more", style="dim")
    return line


def explanation_body(explanation: Explanation, now: datetime, rules: Rules | None = None) -> RenderableType | None:
    """The lines under the headline: what blocks a queued run, or why nothing does."""
    run = explanation.run
    if run.status is not RunStatus.QUEUED:
        return _not_queued_body(explanation, now, rules)
    grid = _grid()
    blocking = explanation.blocking
    passing = [check for check in explanation.checks if check.ok]
    due_in = -waiting_seconds(run, now)
    if due_in > 0:
        grid.add_row(
            "Not yet due:",
            Text(
                f"it may start at {short_time(run.scheduled_at)} (in {age_text(due_in)}); "
                "no run is claimed before its time"
            ),
        )
    if explanation.paused:
        resume = f"  (tidegate queue resume {run.queue})"
        grid.add_row("Blocked by:", Text.assemble((paused_text(run.queue), "bold yellow"), (resume, "dim")))
    for index, check in enumerate(blocking):
        grid.add_row(
            "Blocked by:" if index == 0 and not explanation.paused else "",
            blocking_text(check, explanation.holders.get(check.scope, []), now=now),
        )
    if blocking or explanation.paused:
        if passing:
            grid.add_row("Also checked:", checks_line(passing))
        grid.add_row("ETA:", eta_text(explanation.eta_seconds))
        return grid
    if due_in <= 0:
        grid.add_row(
            "Waiting for:",
            Text.assemble(f"a worker serving queue {run.queue} with free capacity", _local_caps(run.queue, rules)),
        )
    if passing:
        grid.add_row("Limits:", Text.assemble(checks_line(passing), ("  (no limit holds it back)", "dim")))
    else:
        grid.add_row("Limits:", Text("none applies to this run", style="dim"))
    return grid


def eta_text(eta: float | None) -> Text:
    """When the blocking scopes should have room, or why there is no estimate."""
    if eta is None:
        return Text("unknown: no run of a blocking scope has run yet, so nothing says how long one takes", style="dim")
    return Text.assemble(f"about {age_text(eta)}", (" (at the pace of the blocking scopes' runs)", "dim"))


def _grid() -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    return grid


def _not_queued_body(explanation: Explanation, now: datetime, rules: Rules | None) -> RenderableType | None:
    """A waiting parent's slots, a running workflow's waiting steps; nothing for other runs."""
    if explanation.run.status is RunStatus.WAITING:
        return _wait_body(explanation.run, rules)
    if explanation.run.status is RunStatus.RUNNING and explanation.checks:
        return _steps_body(explanation, now)
    return None


def _wait_body(run: RunRecord, rules: Rules | None) -> Table:
    """A waiting parent's slots: released (others may use them) and kept (they still count)."""
    grid = _grid()
    released = [_released_label(scope, rules or Rules()) for scope in run.wait_released or []]
    kept = [label_of(scope, rules or Rules()) for scope in run.wait_kept or []]
    grid.add_row("Released while waiting:", Text(", ".join(released) or "nothing"))
    grid.add_row("Resumes:", Text(resume_rule(run.wait_any)))
    if kept:
        grid.add_row(
            "Kept while waiting:", Text.assemble(", ".join(kept), ("  (they still count for their limits)", "dim"))
        )
    return grid


def _released_label(scope: str, rules: Rules) -> str:
    """Only the global slot is released for its own sake; others because a child needs them too."""
    label = label_of(scope, rules)
    return label if scope == "global" else f"{label} (its children need it too)"


def _steps_body(explanation: Explanation, now: datetime) -> Table:
    """A running workflow: the pools its waiting steps ask for, and who holds the full ones."""
    grid = _grid()
    for index, check in enumerate(explanation.blocking):
        grid.add_row(
            "Steps wait for:" if index == 0 else "",
            blocking_text(check, explanation.holders.get(check.scope, []), now=now),
        )
    passing = [check for check in explanation.checks if check.ok]
    if passing:
        grid.add_row("Pools with room:", checks_line(passing))
    return grid


def _local_caps(queue: str, rules: Rules | None) -> str:
    """Per-worker caps also hold a run back, and they live in each worker, not the store."""
    if rules is None:
        return ""
    caps = []
    max_workers = rules.max_workers(queue)
    if max_workers is not None:
        caps.append(f"at most {max_workers} of this queue's runs")
    local = rules.local_limit(queue)
    if local is not None:
        caps.append(f"{local} per partition")
    return f" (each worker takes {' and '.join(caps)})" if caps else ""
