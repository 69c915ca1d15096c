"""The storage port and its adapters.

Only `tidegate.bootstrap` imports a concrete adapter (`sqlite`, `postgres`);
everything else talks to the `Store` protocol in `port.py`.
"""
