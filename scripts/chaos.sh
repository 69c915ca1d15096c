#!/usr/bin/env bash
# The chaos suite: fault scenarios against SQLite and a private PostgreSQL cluster.
# Usage: scripts/chaos.sh [--short|--long] [--backend sqlite|postgres|both] [--seed N]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
exec .venv/bin/python -m chaos "$@"
