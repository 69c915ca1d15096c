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
# Two pytest-xdist processes (tests/conftest.py's groups keep the multi-process proofs serial and each
# browser module on one process): the suite in about half the time on two cores. Arguments come after,
# so they win: `-n 0` runs in this process (as --pdb needs), `-n 4` on four.
exec .venv/bin/python -m pytest -n 2 --dist loadgroup "${basetemp[@]}" "$@"
