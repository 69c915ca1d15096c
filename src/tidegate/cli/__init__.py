"""The `tidegate` command line (entry point: `tidegate.cli.main:main`).

An interface layer only: each command parses its input, calls the App or
Store API, and renders the answer. No rule about runs lives here, so the
CLI, the HTTP API and the web UI cannot disagree about what a run may do.
This package's `__init__` imports nothing, so that a module such as
`render` can be used without loading every command.
"""
