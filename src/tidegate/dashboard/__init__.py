"""The web dashboard: server-rendered pages over the same engine and store verbs as the API and CLI.

`install` mounts it on the API application (`tidegate serve` serves both): the
pages at `/`, `/queue`, `/pools`, `/runs`, `/limits`, `/schedules`, `/workers`, their static
files at `/static`. It sits below `api` in the layers, so the API hands it the
two things it shares: `grant` (the token check of every route) and `events`
(the event stream, which the pages follow to refresh themselves).
"""

from tidegate.dashboard.site import install

__all__ = ["install"]
