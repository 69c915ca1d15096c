#!/usr/bin/env bash
# The static gates, in the order a failure is cheapest to read: the import
# layering, the linter (with its complexity cap), the formatter's check, the
# type checker. Each fails the build; their settings live in pyproject.toml.
# Each is announced by a "== name ==" line, so a failure names its gate.
# Expects .venv from scripts/setup.sh (scripts/test.sh runs this first).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== import layers =="
.venv/bin/lint-imports --no-logo
echo "== ruff =="
.venv/bin/ruff check .
echo "== ruff format =="
.venv/bin/ruff format --check .
echo "== mypy =="
.venv/bin/mypy
