"""The rescue rule: which lost attempt is charged, and how the rescued runs come back.

A run is rescued when its lease lapsed or its worker's heartbeat stopped.
A crash takes down every run of the process, so charging each of them an
attempt would fail innocent runs beside a poison one; running each of them
alone afterwards (the only way to tell which one crashed) would bring K
runs back in K rounds while capacity idles. The rule, written here once for
both adapters, tests groups instead:

- the attempts one sweep finds lost from one worker are a *crash*;
- every rescued run that goes back to the queue is a *suspect* in a
  *group*: the crash's runs that were already suspects are split in two
  halves, and those that were not in two halves of their own. A worker runs
  the suspects of one group at a time (beside any other work,
  `domain/admission.py`), so a crash holds the suspects of at most one
  group, and a group that crashes again is split again: a poison among K
  runs is cornered in about log2(K) crashes, while the groups without it
  complete in the first round they run;
- a rescued attempt is *charged* (counts toward `max_attempts`, and may end
  the run failed) only if it **started** (its start was recorded for this
  attempt; a suspect's is recorded before its body runs) and the crash is
  surely its own: it ran **alone** (nothing else of its worker unsettled),
  or it was the **only suspect** that started in a crash that holds every
  unsettled run of its worker. A run that crashes its worker is a suspect
  from its first crash on and until it ends, so a crash with exactly one
  started suspect in it is that suspect's (the others beside it had never
  crashed anything); a crash that shared its worker with runs found lost
  earlier, or still running, is not judged (none charged);
- otherwise it is not charged (as a hand-back: `max_attempts` grows by one,
  the attempt number, the fencing token, never goes down) and can never end
  failed by this rescue.

The rule assumes a crash has one cause among its runs: a worker killed from
outside (or a second, new poison beside a lone suspect) charges the lone
suspect one attempt, as a kill always charged a run that was alone.

A run whose cancel was requested ends canceled whatever the rule says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tidegate.domain.integers import grown
from tidegate.domain.transitions import attempts_left, lost_attempt_error


@dataclass(frozen=True)
class LostAttempt:
    """A running attempt the store found lost, as read in the sweep's transaction."""

    run_id: str
    attempt: int
    max_attempts: int
    worker: str | None
    lapsed: bool  # its lease expired (else: its worker's heartbeat stopped)
    started: bool  # its start was recorded for this attempt
    suspect: bool  # it ran as a suspect (in a group of them, domain/admission.py)
    beside: int  # other runs of its worker unsettled at the rescue (running, or rescued from it)
    cancel_requested: bool = False
    # When the attempt was lost (ISO time, UTC): its worker's last heartbeat, or its lease's expiry if
    # that came first; the sweep that finds it may run much later, so this is what `runs show` reports.
    lost_at: str | None = None
    last_heartbeat: str | None = None  # its worker's last heartbeat (ISO, UTC), if the worker was registered


@dataclass(frozen=True)
class Rescue:
    """What the rescue writes: the run's new state and its event."""

    run_id: str
    attempt: int
    status: str  # "queued", "failed" or "canceled"
    charged: bool
    suspect: bool  # the flag the run carries from now on
    max_attempts: int
    error: str | None  # set when the rescue fails the run
    why: str
    group: str | None = None  # the suspects' group it runs in next (None when it does not go back)
    uncharged: bool = False  # it goes back with its budget grown: counted as a lost worker's (domain/attempts.py)

    def metadata(self, lost: LostAttempt) -> dict[str, object]:
        return {
            "attempt": self.attempt,
            "reason": "lease expired" if lost.lapsed else "worker gone",
            "worker": lost.worker,
            "charged": self.charged,
            "suspect": self.suspect,
            "group": self.group,
            "why": self.why,
            "lost_at": lost.lost_at,
            "last_heartbeat": lost.last_heartbeat,
        }


def rescue_lost(lost: Sequence[LostAttempt]) -> list[tuple[LostAttempt, Rescue]]:
    """The verdict for each attempt a sweep found lost: each worker's lost attempts are one crash."""
    crashes: dict[str, list[LostAttempt]] = {}
    for attempt in lost:
        crashes.setdefault(attempt.worker if attempt.worker is not None else f"run {attempt.run_id}", []).append(
            attempt
        )
    return [pair for crash in crashes.values() for pair in zip(crash, rescue(crash), strict=True)]


def rescue(crash: Sequence[LostAttempt]) -> list[Rescue]:
    """The verdicts of one crash (the attempts one sweep found lost from one worker), in its order."""
    # Runs of the worker not in this crash: still running, or found lost by an earlier sweep.
    outside = min(lost.beside for lost in crash) - (len(crash) - 1)
    started_suspects = [lost for lost in crash if lost.suspect and lost.started]
    alone = len(crash) == 1 and outside <= 0
    charged = {lost.run_id: lost.started and (alone or (outside <= 0 and started_suspects == [lost])) for lost in crash}
    back = [lost for lost in crash if _goes_back(lost, charged[lost.run_id])]
    groups = _groups(back)
    sizes = {group: list(groups.values()).count(group) for group in groups.values()}
    verdicts = []
    for lost in crash:
        group = groups.get(lost.run_id)
        size = 0 if group is None else sizes[group]
        verdicts.append(_verdict(lost, charged[lost.run_id], alone, group, size))
    return verdicts


def _goes_back(lost: LostAttempt, charged: bool) -> bool:
    """Whether the rescue puts the run back in the queue (neither canceled nor failed by it)."""
    return not lost.cancel_requested and not (charged and not attempts_left(lost.attempt, lost.max_attempts))


def _groups(back: Sequence[LostAttempt]) -> dict[str, str]:
    """The group each run of a crash goes back in: halves of its suspects, halves of the others.

    Named after the lost worker, which crashes once (its id is one process's),
    so that the attempts of one crash found by two sweeps join the same groups."""
    groups: dict[str, str] = {}
    if not back:
        return groups
    base = back[0].worker or back[0].run_id
    for kind, suspect in (("s", True), ("n", False)):
        members = sorted(lost.run_id for lost in back if lost.suspect is suspect)
        middle = (len(members) + 1) // 2
        for index, run_id in enumerate(members):
            groups[run_id] = f"{base}/{kind}{0 if index < middle else 1}"
    return groups


def _verdict(lost: LostAttempt, charged: bool, alone: bool, group: str | None, size: int) -> Rescue:
    cause = "its lease expired" if lost.lapsed else "its worker is gone"
    if lost.cancel_requested:
        why = f"{cause}; its cancel was requested"
        return Rescue(lost.run_id, lost.attempt, "canceled", False, False, lost.max_attempts, None, why)
    next_round = f"it runs next as a suspect in a group of {size}"
    if not charged:
        if not lost.started:
            why = f"{cause} before its start was recorded: not charged; {next_round}"
        else:
            others = "other run" if lost.beside == 1 else "other runs"
            why = f"{cause} while it ran beside {lost.beside} {others}: not charged; {next_round}"
        return Rescue(
            lost.run_id, lost.attempt, "queued", False, True, grown(lost.max_attempts), None, why, group, uncharged=True
        )
    if alone:
        how = "alone as a suspect" if lost.suspect else "alone"
    else:
        others = "other run" if lost.beside == 1 else "other runs"
        how = f"as the only suspect beside {lost.beside} {others}"
    counted = f"attempt {lost.attempt} of {lost.max_attempts} charged"
    if not attempts_left(lost.attempt, lost.max_attempts):
        error = lost_attempt_error(lost.lapsed, lost.attempt, lost.max_attempts)
        why = f"{cause} while it ran {how}: {counted}, none left"
        return Rescue(lost.run_id, lost.attempt, "failed", True, False, lost.max_attempts, error, why)
    why = f"{cause} while it ran {how}: {counted}; {next_round}"
    return Rescue(lost.run_id, lost.attempt, "queued", True, True, lost.max_attempts, None, why, group)
