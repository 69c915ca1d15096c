#!/usr/bin/env bash
# Set up, run the static gates (import layering, ruff, mypy: scripts/lint.sh),
# make sure PostgreSQL is running, and run the whole suite on both SQLite and
# PostgreSQL. Each gate is announced by a "== name ==" line. Arguments go to pytest.
# TIDEGATE_TEST_POSTGRES=postgresql://... points the PostgreSQL tests at another server.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== set-up =="
bash scripts/setup.sh test
bash scripts/lint.sh
echo "== PostgreSQL =="
bash scripts/ensure_postgres.sh
echo "== tests =="
exec .venv/bin/python -m pytest "$@"
