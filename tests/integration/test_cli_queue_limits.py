"""`tidegate queue list|why|cancel` and `tidegate limits list|set|reset`, through the real CLI.

Runs are put in the states an operator meets (running and holding slots,
queued behind a full scope, not yet due) by driving the store's own worker
cycle by hand, so every rendering test is deterministic; one test uses a real
in-thread worker. SQLite only: these tests are about what the CLI prints.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from tidegate import App, Concurrency, Partition, RunQueueConfig, RunStatus, TagConcurrencyLimit
from tidegate.cli.main import app as cli
from tidegate.demo.concurrency import pool_tally, tally
from tidegate.domain.model import CycleRequest, EventRecord, Outcome, OutcomeKind, RunRecord
from tidegate.domain.scopes import Rules

from .conftest import wait_status

WORKER = "test-worker"
QUEUES = ["default", "slow", "api"]
ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})


def one_error_line(result) -> str:
    """A refused command: exit 1 and exactly one line, `error: ...`, on stderr."""
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def build_app(url: str) -> App:
    app = App(
        url,
        run_queue=RunQueueConfig(
            max_concurrent_runs=10,
            tag_concurrency_limits=[
                TagConcurrencyLimit(key="env", value="prod", limit=2),
                TagConcurrencyLimit(key="tenant", per_unique_value=True, limit=1),
            ],
        ),
    )
    app.queue("slow", concurrency=Concurrency(global_limit=1))
    app.queue(
        "api",
        max_workers=5,
        concurrency=Concurrency(
            global_limit=2, partition=Partition(by_args=["customer_id"]), overrides={"customer_id=42": 3}
        ),
    )

    @app.task(name="nap", queue="slow")
    def nap(seconds: float = 0) -> None:
        return None

    @app.task(name="sync_customer", queue="api")
    def sync_customer(customer_id: int) -> None:
        return None

    @app.task(name="hello")
    def hello() -> None:
        return None

    return app


@dataclass
class Scene:
    """Runs in known states; `claim()` plays one worker cycle (claims, records block reasons)."""

    url: str
    app: App
    naps: list[str]  # [running, queued (blocked), queued (blocked)]
    acme: list[str]  # sync_customer(customer_id=3) tenant=acme: [running, queued (blocked by the tenant)]

    def claim(self) -> None:
        self.app.store.cycle(CycleRequest(WORKER, QUEUES, [], [], 10, 60))

    def run(self, run_id: str) -> RunRecord:
        record = self.app.store.get_run(run_id)
        assert record is not None
        return record

    def finish(self, run_id: str) -> None:
        run = self.run(run_id)
        self.app.store.cycle(
            CycleRequest(WORKER, QUEUES, [], [Outcome(run_id, run.attempt, OutcomeKind.COMPLETED)], 0, 60)
        )


@pytest.fixture
def scene(sqlite_url: str) -> Iterator[Scene]:
    app = build_app(sqlite_url)
    try:
        nap = app.tasks["nap"]
        naps = [nap.submit(seconds=5).id for _ in range(3)]
        sync = app.tasks["sync_customer"].options(tags={"tenant": "acme"})
        acme = [sync.submit(customer_id=3).id for _ in range(2)]
        store = app.store
        store.cycle(CycleRequest(WORKER, QUEUES, [], [], 10, 60))  # claims naps[0] and acme[0]
        store.cycle(CycleRequest(WORKER, QUEUES, [], [], 10, 60))  # the others stay blocked, with their reasons
        assert [store.get_run(run_id).status for run_id in naps + acme] == [  # type: ignore[union-attr]
            RunStatus.RUNNING,
            RunStatus.QUEUED,
            RunStatus.QUEUED,
            RunStatus.RUNNING,
            RunStatus.QUEUED,
        ]
        yield Scene(sqlite_url, app, naps, acme)
    finally:
        app.close()


# --- queue list ------------------------------------------------------------------------------------


def test_queue_list_shows_claim_order_positions_and_block_reasons(scene: Scene) -> None:
    result = invoke("queue", "list", "--database", scene.url)
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if ULID.search(line)]
    assert [ULID.search(row).group(0) for row in rows] == [scene.naps[1], scene.naps[2], scene.acme[1]]
    assert [row.split()[0] for row in rows] == ["1", "2", "3"]  # one claim rank down the mixed list
    assert "queue:slow 1/1" in rows[0]
    assert "tag:tenant=acme 1/1" in rows[2]
    assert "queue:api/customer_id=3" not in rows[2]  # the partition (1/2) had room: not a block reason
    assert "3 of 3 queued runs" in result.stdout
    assert "3 held back by a limit" in result.stdout
    assert "fair ordering" not in result.stdout  # no queue here takes turns


def test_queue_list_filters_by_queue_and_says_when_there_is_more(scene: Scene) -> None:
    result = invoke("queue", "list", "--queue", "slow", "--limit", "1", "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert scene.naps[1] in result.stdout and scene.naps[2] not in result.stdout
    caption = " ".join(result.stdout.split())  # the caption may wrap
    assert "1 of 2 queued runs in queue slow" in caption
    assert "more with --limit" in caption


def test_queue_list_marks_runs_not_yet_due(scene: Scene) -> None:
    later = scene.app.tasks["hello"].options(run_at=timedelta(minutes=5)).submit().id
    result = invoke("queue", "list", "--queue", "default", "--database", scene.url)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if later in line)
    assert "not yet due" in row and re.search(r"in 4m5\ds", row)
    assert "1 not yet due" in result.stdout


def test_queue_list_says_positions_in_a_fair_queue_are_not_the_claim_order(sqlite_url: str) -> None:
    app = App(sqlite_url)
    app.queue("shared", ordering="fair", concurrency=Concurrency(partition=Partition(by_args=["tenant"])))

    @app.task(name="work", queue="shared")
    def work(tenant: str) -> None:
        return None

    try:
        work.submit_many([{"tenant": "a"}, {"tenant": "a"}, {"tenant": "b"}])
        fair = invoke("queue", "list", "--database", sqlite_url)
    finally:
        app.close()
    assert fair.exit_code == 0, fair.output
    assert "fair ordering in shared: partitions take turns" in fair.stdout


def test_queue_list_on_an_empty_queue(scene: Scene) -> None:
    result = invoke("queue", "list", "--queue", "default", "--database", scene.url)
    assert result.exit_code == 0
    assert result.stdout.strip() == "no queued runs in queue default"


def test_runs_show_reads_a_block_reason_like_queue_list(scene: Scene) -> None:
    result = invoke("runs", "show", scene.naps[1], "--database", scene.url)
    assert result.exit_code == 0, result.output
    blocked = next(line for line in result.stdout.splitlines() if "RunBlocked" in line)
    assert blocked.split()[-4:] == ["RunBlocked", "by", "queue:slow", "1/1"]


# --- queue why -------------------------------------------------------------------------------------


def test_queue_why_names_the_blocking_scope_and_its_holders(scene: Scene) -> None:
    result = invoke("queue", "why", scene.acme[1], "--database", scene.url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"Run {scene.acme[1]} (sync_customer) is queued: position 1 of 1 in queue api")
    assert "priority 0" in lines[0] and "ago" in lines[0]
    blocked = next(line for line in lines if line.startswith("Blocked by:"))
    assert f"tag tenant=acme — 1 of 1 slot held by {scene.acme[0]}" in blocked
    checked = next(line for line in lines if line.startswith("Also checked:"))
    assert "max_concurrent_runs 2/10 ok" in checked
    assert "queue api partition customer_id=3 1/2 ok" in checked


def test_queue_why_puts_each_blocking_scope_on_its_own_line(scene: Scene) -> None:
    prod = scene.app.tasks["sync_customer"].options(tags={"tenant": "globex", "env": "prod"})
    first, second = (prod.submit(customer_id=7).id for _ in range(2))
    scene.claim()  # first takes tenant=globex: second waits on it
    scene.app.store.set_limit("tag:env=prod", 1)  # and now env=prod (held by first) is full too
    result = invoke("queue", "why", second, "--database", scene.url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("Blocked by:"))
    assert f"tag env=prod — 1 of 1 slot held by {first}" in lines[start]
    assert lines[start + 1].lstrip().startswith(f"tag tenant=globex — 1 of 1 slot held by {first}")


def test_queue_why_when_no_limit_holds_the_run_back(scene: Scene) -> None:
    waiting = scene.app.tasks["hello"].submit().id
    result = invoke("queue", "why", waiting, "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert "Blocked by" not in result.stdout
    assert "Waiting for: a worker serving queue default with free capacity" in result.stdout
    assert "max_concurrent_runs 2/10 ok" in result.stdout


def test_queue_why_for_a_run_not_yet_due(scene: Scene) -> None:
    later = scene.app.tasks["hello"].options(run_at=datetime.now(UTC) + timedelta(minutes=10)).submit().id
    result = invoke("queue", "why", later, "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert "due in 9m5" in result.stdout
    assert "Not yet due:" in result.stdout
    assert "Waiting for" not in result.stdout


def test_queue_why_for_runs_that_are_not_queued(scene: Scene) -> None:
    result = invoke("queue", "why", scene.naps[0], "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert f"Run {scene.naps[0]} (nap) is running, not queued: attempt 1 of 1 on worker {WORKER}" in result.stdout
    scene.finish(scene.naps[0])
    result = invoke("queue", "why", scene.naps[0], "--database", scene.url)
    assert "is completed, not queued: finished" in result.stdout


def test_queue_why_for_an_unknown_run(scene: Scene) -> None:
    line = one_error_line(invoke("queue", "why", "01NOPE", "--database", scene.url))
    assert line.startswith("error: no run with id '01NOPE' in sqlite:///")


# --- queue cancel ----------------------------------------------------------------------------------


def test_queue_cancel_cancels_a_queued_run(scene: Scene) -> None:
    result = invoke("queue", "cancel", scene.naps[2], "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert f"run {scene.naps[2]} (nap): canceled" in result.stdout
    assert "it was queued at position 2 of 2 in queue slow" in result.stdout
    assert scene.run(scene.naps[2]).status is RunStatus.CANCELED


def test_queue_cancel_refuses_a_running_run_and_leaves_it_alone(scene: Scene) -> None:
    line = one_error_line(invoke("queue", "cancel", scene.naps[0], "--database", scene.url))
    assert f"run {scene.naps[0]} is running, not queued" in line
    assert f"tidegate runs cancel {scene.naps[0]}" in line
    run = scene.run(scene.naps[0])
    assert run.status is RunStatus.RUNNING and not run.cancel_requested


def test_queue_cancel_refuses_finished_and_unknown_runs(scene: Scene) -> None:
    scene.finish(scene.naps[0])
    line = one_error_line(invoke("queue", "cancel", scene.naps[0], "--database", scene.url))
    assert line == f"error: run {scene.naps[0]} is completed, not queued: nothing to cancel"
    assert scene.run(scene.naps[0]).status is RunStatus.COMPLETED
    assert "no run with id 'XYZ'" in one_error_line(invoke("queue", "cancel", "XYZ", "--database", scene.url))


# --- limits list -----------------------------------------------------------------------------------


def _row(output: str, scope: str) -> str:
    return next(line for line in output.splitlines() if line.split() and line.split()[0] == scope)


def test_limits_list_shows_every_limit_with_usage_and_origin(scene: Scene) -> None:
    result = invoke("limits", "list", "--database", scene.url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert _row(out, "global").split()[1:3] == ["10", "2/10"]
    assert _row(out, "queue:slow").split()[1:3] == ["1", "1/1"]
    assert _row(out, "queue:default").split()[1] == "unlimited"
    assert "each customer_id partition" in _row(out, "queue:api")
    assert _row(out, "queue:api/customer_id=3").split()[1:3] == ["2", "1/2"]
    assert "code override" in _row(out, "queue:api/customer_id=42")
    assert _row(out, "queue:api/customer_id=42").split()[1:3] == ["3", "0/3"]
    assert _row(out, "tag:env=prod").split()[1:3] == ["2", "0/2"]
    assert "each value" in _row(out, "tag:tenant")
    assert _row(out, "tag:tenant=acme").split()[1:3] == ["1", "1/1"]
    queues = _row(out, "api").split()  # the queues table
    assert queues == ["api", "customer_id", "2", "unlimited", "5", "priority", "open"]
    assert "no live overrides" in out


def test_limits_list_marks_live_overrides_as_winning_over_code(scene: Scene) -> None:
    assert invoke("limits", "set", "queue:slow", "3", "--database", scene.url).exit_code == 0
    assert invoke("limits", "set", "tag:tenant=acme", "unlimited", "--database", scene.url).exit_code == 0
    result = invoke("limits", "list", "--database", scene.url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert _row(out, "queue:slow").split()[1:3] == ["3", "1/3"]
    assert "live v1, code: 1" in _row(out, "queue:slow")
    assert "live v1, code: 1" in _row(out, "tag:tenant=acme")
    overrides = out[out.index("live overrides") :]
    assert _row(overrides, "queue:slow").split()[1:4] == ["3", "1", "v1"]
    assert _row(overrides, "tag:tenant=acme").split()[1:4] == ["unlimited", "1", "v1"]


def test_a_tag_override_without_a_declaration_limits_each_value(scene: Scene) -> None:
    result = invoke("limits", "set", "tag:region", "2", "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert "each value of tag region" in _row(invoke("limits", "list", "--database", scene.url).stdout, "tag:region")
    rules = scene.app.store.rules()
    assert rules.tag_limit("region", "eu") == 2
    assert [need.key for need in rules.scopes_for("slow", "", {"region": "eu"}) if need.key.startswith("tag:")] == [
        "tag:region=eu"
    ]


# --- limits set / reset ----------------------------------------------------------------------------


def test_limits_set_dry_run_previews_and_changes_nothing(scene: Scene) -> None:
    result = invoke("limits", "set", "queue:slow", "3", "--dry-run", "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert "queue:slow: 1 -> 3  (dry run: nothing changed)" in result.stdout
    assert "would unblock 2 queued runs / hold back 0" in result.stdout
    assert scene.app.store.limit_overrides() == []
    assert scene.app.store.rules().queue_limit("slow", "") == 1


def test_limits_set_dry_run_counts_runs_a_lower_limit_would_hold_back(scene: Scene) -> None:
    for _ in range(2):
        scene.app.tasks["sync_customer"].options(tags={"tenant": "initech"}).submit(customer_id=42)
    scene.app.tasks["sync_customer"].options(tags={"tenant": "umbrella"}).submit(customer_id=42)
    result = invoke("limits", "set", "global", "2", "--dry-run", "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert "global: 10 -> 2" in result.stdout
    assert "hold back 2" in result.stdout  # the startable initech and umbrella runs
    assert "2 slots of global are held now" not in result.stdout  # 2 held, not over 2
    result = invoke("limits", "set", "global", "1", "--dry-run", "--database", scene.url)
    assert "2 slots of global are held now, over the new limit" in result.stdout


def test_limits_set_applies_and_versions(scene: Scene) -> None:
    result = invoke("limits", "set", "queue:api/customer_id=3", "5", "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "queue:api/customer_id=3: 2 -> 5  (live override, version 1)"
    result = invoke("limits", "set", "queue:api/customer_id=3", "unlimited", "--database", scene.url)
    assert result.stdout.strip() == "queue:api/customer_id=3: 5 -> unlimited  (live override, version 2)"
    assert scene.app.store.rules().overrides == {"queue:api/customer_id=3": None}


def test_limits_reset_removes_the_override(scene: Scene) -> None:
    invoke("limits", "set", "queue:slow", "3", "--database", scene.url)
    result = invoke("limits", "reset", "queue:slow", "--dry-run", "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert "queue:slow: 3 -> 1  (dry run: nothing changed)" in result.stdout
    assert "1 slots of queue:slow are held now" not in result.stdout
    assert scene.app.store.rules().overrides == {"queue:slow": 3}
    result = invoke("limits", "reset", "queue:slow", "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert "queue:slow: 3 -> 1  (live override removed: the code's limit is in force)" in result.stdout
    assert scene.app.store.rules().overrides == {}
    result = invoke("limits", "reset", "queue:slow", "--database", scene.url)
    assert result.exit_code == 0
    assert "queue:slow: no live override to reset (limit in force: 1)" in result.stdout


# --- queue pause / resume --------------------------------------------------------------------------


def test_a_paused_queue_is_shown_as_the_block_reason_everywhere_until_resumed(scene: Scene) -> None:
    result = invoke("queue", "pause", "api", "--database", scene.url)
    assert result.exit_code == 0, result.output
    assert "queue api: paused" in result.stdout
    assert scene.app.store.rules().paused == {"api"}
    assert "already paused" in invoke("queue", "pause", "api", "--database", scene.url).stdout

    listed = invoke("queue", "list", "--database", scene.url).stdout
    row = next(line for line in listed.splitlines() if scene.acme[1] in line)
    assert "queue api is paused · tag:tenant=acme 1/1" in row  # the pause first, then the full tag, as `why` says
    assert "queue:slow 1/1" in next(line for line in listed.splitlines() if scene.naps[1] in line)
    assert "paused: api (tidegate queue resume QUEUE)" in " ".join(listed.split())  # the caption may wrap
    why = invoke("queue", "why", scene.acme[1], "--database", scene.url).stdout
    blocked = [line for line in why.splitlines() if line.startswith("Blocked by:")]
    assert len(blocked) == 1 and "queue api is paused  (tidegate queue resume api)" in blocked[0]
    assert f"tag tenant=acme — 1 of 1 slot held by {scene.acme[0]}" in why  # the limit is still shown
    queues = invoke("limits", "list", "--database", scene.url).stdout
    assert "paused" in _row(queues, "api") and "open" in _row(queues, "slow")

    scene.finish(scene.acme[0])  # the tenant's slot frees: still nothing of a paused queue starts
    scene.claim()
    assert scene.run(scene.acme[1]).status is RunStatus.QUEUED
    result = invoke("queue", "resume", "api", "--database", scene.url)
    assert result.exit_code == 0 and "queue api: resumed" in result.stdout
    assert "queue api is paused" not in invoke("queue", "why", scene.acme[1], "--database", scene.url).stdout
    scene.claim()
    assert scene.run(scene.acme[1]).status is RunStatus.RUNNING


def test_pausing_an_unknown_queue_is_one_line_and_changes_nothing(scene: Scene) -> None:
    line = one_error_line(invoke("queue", "pause", "nowhere", "--database", scene.url))
    assert "no queue named 'nowhere' is declared" in line
    line = one_error_line(invoke("queue", "resume", "bad name", "--database", scene.url))
    assert "queue name 'bad name' is not valid" in line
    assert scene.app.store.rules().paused == frozenset()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["set", "bogus", "3"], "limit target 'bogus' is not valid"),
        (["set", "queue:nope", "3"], "no queue named 'nope' is declared"),
        (["set", "queue:api/region=eu", "2"], "'region' is not a partition key of this queue"),
        (["set", "queue:slow/customer_id=3", "2"], "the queue has no partition to override"),
        (["set", "tag:=x", "1"], "expected tag:KEY=VALUE or tag:KEY"),
        (["set", "global", "0"], "a limit must be at least 1, got 0"),
        (["set", "global", "abc"], "LIMIT 'abc' is not valid: use a whole number >= 1 or 'unlimited'"),
        (["set", "global", "2.5", "--dry-run"], "LIMIT '2.5' is not valid"),
        (["set", "bogus", "3", "--dry-run"], "limit target 'bogus' is not valid"),
        (["reset", "queue:nope"], "no queue named 'nope' is declared"),
        (["reset", "bogus", "--dry-run"], "limit target 'bogus' is not valid"),
    ],
)
def test_bad_targets_and_limits_are_one_line_and_change_nothing(scene: Scene, args: list[str], message: str) -> None:
    line = one_error_line(invoke("limits", *args, "--database", scene.url))
    assert message in line
    assert scene.app.store.limit_overrides() == []


def test_commands_refuse_a_missing_database(tmp_path) -> None:
    missing = f"sqlite:///{tmp_path}/missing.db"
    for args in (["queue", "list"], ["queue", "why", "X"], ["limits", "list"], ["limits", "set", "global", "2"]):
        assert "no database at" in one_error_line(invoke(*args, "--database", missing))
    assert not (tmp_path / "missing.db").exists()


# --- with a real worker ----------------------------------------------------------------------------


def test_queue_why_and_cancel_while_a_worker_holds_the_only_slot(sqlite_url: str) -> None:
    app = App(sqlite_url)
    app.queue("solo", concurrency=Concurrency(global_limit=1))
    release = threading.Event()

    @app.task(name="hold", queue="solo")
    def hold(n: int) -> int:
        release.wait(30)
        return n

    # All three queued before the worker starts: its first claim reads them all, takes the first and
    # records why the others wait (`queue list` shows the reason of their last claim; a worker woken
    # later while the slot is full only looks, and reads no run).
    first, second, third = (handle.id for handle in hold.submit_many([{"n": n} for n in range(3)]))
    worker = app.worker(max_workers=4, poll_interval="50ms").start()
    try:
        wait_status(app, first, RunStatus.RUNNING)  # claimed in the transaction that recorded the reasons
        why = invoke("queue", "why", second, "--database", sqlite_url)
        assert why.exit_code == 0, why.output
        assert "position 1 of 2 in queue solo" in why.stdout
        assert f"queue solo — 1 of 1 slot held by {first}" in why.stdout
        listed = invoke("queue", "list", "--database", sqlite_url).stdout
        assert "queue:solo 1/1" in listed
        assert invoke("queue", "cancel", third, "--database", sqlite_url).exit_code == 0
        assert "is running, not queued" in one_error_line(invoke("queue", "cancel", first, "--database", sqlite_url))
        release.set()
        wait_status(app, second, RunStatus.COMPLETED)
        assert app.run(first).status() is RunStatus.COMPLETED
        assert app.run(third).status() is RunStatus.CANCELED
    finally:
        release.set()
        worker.stop(timeout=30, grace=0)
        assert worker.join(30)
        app.close()


# --- the demo's replay of claims and releases -----------------------------------------------------


def _run(run_id: str, queue: str = "q", tags: dict[str, str] | None = None) -> RunRecord:
    at = datetime.now(UTC)
    return RunRecord(
        id=run_id,
        task="t",
        queue=queue,
        partition="",
        status=RunStatus.COMPLETED,
        priority=0,
        args={},
        tags=tags or {},
        concurrency_key=None,
        attempt=1,
        max_attempts=1,
        submitted_at=at,
        scheduled_at=at,
        started_at=at,
        finished_at=at,
        worker_id=None,
        lease_expires_at=None,
        cancel_requested=False,
        result=None,
        error=None,
        block_reason=None,
    )


def _events(*timeline: tuple[int, str, str], blocked: dict[str, str] | None = None) -> dict[str, list[EventRecord]]:
    at = datetime.now(UTC)
    events: dict[str, list[EventRecord]] = {}
    for event_id, run_id, kind in timeline:
        metadata = {"blocked_by": [{"scope": blocked[run_id], "used": 1, "limit": 1}]} if kind == "RunBlocked" else {}
        events.setdefault(run_id, []).append(EventRecord(event_id, run_id, None, kind, metadata, at))
    return events


def test_demo_replay_counts_the_most_runs_holding_each_scope_by_event_order() -> None:
    from tidegate.domain.limits import QueueConfig

    rules = Rules(RunQueueConfig(max_concurrent_runs=2), {"q": QueueConfig("q", Concurrency(global_limit=1))})
    runs = [_run("a"), _run("b"), _run("c")]
    # a runs, fails and is retried; b waits on the queue scope; c is canceled while queued
    events = _events(
        (1, "a", "RunDequeued"),
        (2, "b", "RunBlocked"),
        (3, "a", "RunRetried"),
        (4, "b", "RunDequeued"),
        (5, "c", "RunCanceled"),
        (6, "b", "RunCompleted"),
        (7, "a", "RunDequeued"),
        (8, "a", "RunCompleted"),
        blocked={"b": "queue:q"},
    )
    tallies = {item.scope: item for item in tally(runs, events, rules)}
    assert [tallies["global"].max_seen, tallies["queue:q"].max_seen] == [1, 1]
    assert tallies["queue:q"].held_back == 1 and tallies["queue:q"].runs == 3
    assert all(item.kept for item in tallies.values())
    # the same runs overlapping: the replay must see the queue limit exceeded
    overlapping = _events(
        (1, "a", "RunDequeued"), (2, "b", "RunDequeued"), (3, "a", "RunCompleted"), (4, "b", "RunCompleted")
    )
    tallies = {item.scope: item for item in tally(runs, overlapping, rules)}
    assert tallies["queue:q"].max_seen == 2 and not tallies["queue:q"].kept
    assert tallies["global"].kept


def test_demo_replay_counts_the_most_pool_slots_held_by_steps_at_once() -> None:
    at = datetime.now(UTC)

    def step_event(event_id: int, run_id: str, step: str, kind: str, metadata: dict) -> EventRecord:
        return EventRecord(event_id, run_id, step, kind, metadata, at)

    claimed = {"pools": {"db": 1}}
    events = {
        "a": [
            step_event(1, "a", "q[0]", "StepSlotClaimed", claimed),
            step_event(3, "a", "q[1]", "StepSlotWaiting", {"blocked_by": [{"pool": "db", "claimed": 2, "limit": 2}]}),
            step_event(4, "a", "q[0]", "StepSlotReleased", claimed),
            step_event(5, "a", "q[1]", "StepSlotClaimed", claimed),
            step_event(7, "a", None, "RunCompleted", {}),  # frees q[1] with the run
        ],
        "b": [
            step_event(2, "b", "q[0]", "StepSlotClaimed", claimed),
            step_event(6, "b", "q[0]", "StepSlotReleased", claimed),
            step_event(8, "b", "q[1]", "StepSlotClaimed", claimed),
            step_event(9, "b", "q[1]", "StepSlotReleased", claimed),
        ],
    }
    [db] = pool_tally(events, {"db": 2})
    assert (db.scope, db.max_seen, db.runs, db.held_back, db.kept) == ("pool:db", 2, 4, 1, True)
    [tight] = pool_tally(events, {"db": 1})  # the same history under a limit of 1: exceeded
    assert tight.max_seen == 2 and not tight.kept
