#!/usr/bin/env bash
# Set up, then run the demo on the embedded SQLite database: worker processes
# drain a few hundred runs while tidegate keeps the limits.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/tidegate demo "$@"
