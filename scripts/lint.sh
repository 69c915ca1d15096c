#!/usr/bin/env bash
# The static gates, in the order a failure is cheapest to read: the import
# layering, the linter (with its complexity cap), the formatter's check, the
# type checker. Each fails the build; their settings live in pyproject.toml.
# Expects .venv from scripts/setup.sh (scripts/test.sh runs this first).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/lint-imports
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
