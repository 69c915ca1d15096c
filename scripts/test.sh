#!/usr/bin/env bash
# Set up, make sure PostgreSQL is running, run the static gates (import
# layering, ruff, mypy: scripts/lint.sh), and run the whole suite on both
# SQLite and PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/ensure_postgres.sh
bash scripts/lint.sh
exec .venv/bin/python -m pytest "$@"
