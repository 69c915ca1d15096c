"""The chaos suite: fault scenarios against real worker processes, then a history checker.

Part of the project's tests, not of the shipped package (`src/tidegate`): run it with
`python -m chaos` or `scripts/chaos.sh`. See `chaos/__main__.py`.
"""
