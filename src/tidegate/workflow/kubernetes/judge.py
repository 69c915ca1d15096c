"""What a Job's and its pod's status say about the step try (pure: plain dicts as the API serves them).

A step try has succeeded when its Job has; it has failed, with a reason a user
can act on, when the Job failed (its pod failed, was evicted, or ran past
`activeDeadlineSeconds`) or when its pod cannot start at all (the image cannot
be pulled, the container's config is wrong): a Job with such a pod would wait
forever, so the step fails at once and its Job is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Waiting reasons of a container that will not start without someone changing something. A first
# ErrImagePull is not one: the kubelet pulls again (a registry hiccup), and reports ImagePullBackOff
# once that failed too.
STUCK_REASONS = frozenset({"ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"})


@dataclass(frozen=True)
class Outcome:
    """A finished step try: succeeded, or failed with `reason` (and the pod it ran in, if known)."""

    succeeded: bool
    reason: str = ""


def job_outcome(job: Mapping[str, Any]) -> Outcome | None:
    """The Job's own verdict, None while it runs."""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return Outcome(True)
        if condition.get("type") == "Failed":
            return Outcome(False, _reason(condition.get("reason") or "Failed", condition.get("message")))
    if (status.get("succeeded") or 0) > 0:
        return Outcome(True)
    if (status.get("failed") or 0) > 0:
        return Outcome(False, "Failed: its pod failed")
    return None


def pod_outcome(pod: Mapping[str, Any]) -> Outcome | None:
    """A failure the pod shows before (or instead of) its Job: stuck, evicted or failed; None otherwise."""
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_REASONS:
            return Outcome(False, _reason(waiting["reason"], waiting.get("message")))
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated and terminated.get("exitCode") not in (None, 0) and status.get("phase") == "Failed":
            reason = terminated.get("reason") or "Error"
            detail = f"exit code {terminated['exitCode']}"
            lines = str(terminated.get("message") or "").strip().splitlines()
            if lines:
                detail += f": {lines[-1]}"  # the step's error (FallbackToLogsOnError: its traceback's last line)
            return Outcome(False, _reason(reason, detail))
    if status.get("phase") == "Failed":
        return Outcome(False, _reason(status.get("reason") or "PodFailed", status.get("message")))
    return None


def _reason(reason: str, message: str | None) -> str:
    return f"{reason}: {message}" if message else reason
