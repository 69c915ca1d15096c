#!/usr/bin/env bash
# Set up, make sure PostgreSQL is running, check the import layering, and run
# the whole suite on both SQLite and PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/ensure_postgres.sh
.venv/bin/lint-imports
exec .venv/bin/python -m pytest "$@"
