#!/usr/bin/env bash
# Set up, run the static gates (import layering, ruff, mypy: scripts/lint.sh),
# make sure PostgreSQL is running, and run the whole suite on both SQLite and
# PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/lint.sh
bash scripts/ensure_postgres.sh
exec .venv/bin/python -m pytest "$@"
