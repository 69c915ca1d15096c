#!/usr/bin/env bash
# Create .venv (if needed) and install tidegate with its test tools.
# Idempotent: re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
# The browser tests (tests/browser/) drive Debian's chromium through Playwright: never a downloaded browser.
# (Its recommended packages bring the fonts pages are drawn with.)
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q chromium > /dev/null || { apt-get update -q > /dev/null && apt-get install -y -q chromium > /dev/null; }
fi
