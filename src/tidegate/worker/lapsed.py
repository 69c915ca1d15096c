"""Runs taken ahead under a rate whose lead ran out before a slot freed: they wait for a recharge.

Such a run was charged with a lead it must start within, counted from its
claim's sending (`ClaimedRun.lead`, docs/rates.md). The dispatcher moves one
whose lead passed here instead of starting it; the worker's next cycle names
them all (`CycleRequest.recharge`), and each the store charges again goes back
first in line for a slot (`Dispatcher.recharged`). One the store could not
charge yet stays, and is asked again by a later cycle.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence

from tidegate.domain.model import ClaimedRun
from tidegate.storage.port import Fence


def lead_ran_out(run: ClaimedRun, claim_sent: float, now: float) -> bool:
    """Whether a run taken ahead under a rate may no longer start on its charge at monotonic `now`:
    its lead, counted from its claim's sending (the charge's instant is after it), has passed."""
    return run.lead is not None and now > claim_sent + run.lead


class Lapsed:
    """The runs whose lead ran out, with their claims' sending times, in the order they would start."""

    def __init__(self) -> None:
        self._runs: deque[tuple[ClaimedRun, float]] = deque()
        self._asked: set[Fence] = set()  # of those, the ones a cycle was asked to recharge

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[tuple[ClaimedRun, float]]:
        return iter(list(self._runs))

    def add(self, run: ClaimedRun, claim_sent: float) -> None:
        self._runs.append((run, claim_sent))

    @property
    def unasked(self) -> bool:
        """Some run here was not named to a cycle yet (the worker turns at once for it)."""
        return any(run.fence not in self._asked for run, _ in self._runs)

    def ask(self) -> list[Fence]:
        """Every run here, for the next cycle to charge again (one not recharged last time too)."""
        fences = [run.fence for run, _ in self._runs]
        self._asked.update(fences)
        return fences

    def answered(self, asked: Sequence[Fence], leads: Mapping[str, float | None]) -> list[ClaimedRun]:
        """Take out the runs of `asked` the store charged again (`leads`: each one's fresh lead),
        in order, each with its new lead; the others stay, to be asked again."""
        wanted = set(asked)
        back = [entry for entry in self._runs if entry[0].fence in wanted and entry[0].id in leads]
        for entry in back:
            self._runs.remove(entry)
            self._asked.discard(entry[0].fence)
        return [run.with_lead(leads[run.id]) for run, _ in back]

    def failed(self, asked: Sequence[Fence]) -> None:
        """The cycle that would charge `asked` again failed: the next turn asks again at once."""
        self._asked.difference_update(asked)

    def take(self, fences: Sequence[Fence] | None = None) -> list[tuple[ClaimedRun, float]]:
        """Take out the runs of `fences` (all, if None), with their claims' sending times."""
        taken = [entry for entry in self._runs if fences is None or entry[0].fence in set(fences)]
        for entry in taken:
            self._runs.remove(entry)
            self._asked.discard(entry[0].fence)
        return taken
