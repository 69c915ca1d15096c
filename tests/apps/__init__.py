"""Task apps for multi-process tests, importable as `tests.apps.<name>:app`.

Each module builds its app from `$TIDEGATE_DATABASE` at import (App() only
parses the URL, it opens nothing), and exposes `make_app(database)` so the
test process can build the same task definitions against its own URL.
"""
