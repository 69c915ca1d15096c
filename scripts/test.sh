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
# A base temp folder of this run's own: pytest's default is shared by every run of the same user,
# and each run removes all but the newest three (a concurrent run's folder among them).
basetemp=()
case " $* " in
  *" --basetemp"*) ;;
  *) basetemp=(--basetemp "$(mktemp -d "${TMPDIR:-/tmp}/tidegate-tests.XXXXXX")") ;;
esac
exec .venv/bin/python -m pytest "${basetemp[@]}" "$@"
