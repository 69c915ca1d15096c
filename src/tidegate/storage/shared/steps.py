"""The one-step slot request both step aggregates answer with their batch verb."""

from __future__ import annotations

from collections.abc import Sequence

from tidegate.domain.steps import SlotGrant, SlotRequest
from tidegate.storage.port import Fence


class OneStepAcquire:
    """`acquire_slots` as `acquire_many` of one request, strict: a request no limit can satisfy raises."""

    def acquire_many(
        self, fence: Fence, worker_id: str, requests: Sequence[SlotRequest], strict: bool = False
    ) -> list[SlotGrant] | None:
        raise NotImplementedError  # each dialect's step aggregate answers it

    def acquire_slots(self, fence: Fence, worker_id: str, request: SlotRequest) -> SlotGrant:
        grants = self.acquire_many(fence, worker_id, [request], strict=True)
        return SlotGrant(False, fenced_out=True) if grants is None else grants[0]
