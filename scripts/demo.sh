#!/usr/bin/env bash
# Set up .venv with the package alone (no test tools, no browser), then run the demo on the
# embedded SQLite database: worker processes drain a few hundred runs while tidegate keeps the limits.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
exec .venv/bin/tidegate demo "$@"
