"""Operator-facing reasoning over the store: why a run waits, what a limit change would do.

It reads through the Store port and decides with the pure domain policy, so
the CLI, the API and the dashboard explain runs exactly as claims decide them.
"""
