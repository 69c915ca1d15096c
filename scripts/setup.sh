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
# The browser tests check every page with axe-core (accessibility rules), from its npm package:
# fetched here into the venv (test-only, never committed), with node's npm (apt-get'd as root when missing).
AXE_VERSION=4.14.1
AXE=".venv/axe-core-$AXE_VERSION/axe.min.js"
if [ ! -f "$AXE" ]; then
  if ! command -v npm > /dev/null && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q nodejs npm > /dev/null || { apt-get update -q > /dev/null && apt-get install -y -q nodejs npm > /dev/null; }
  fi
  if command -v npm > /dev/null; then
    packed="$(mktemp -d)"
    (cd "$packed" && npm pack --silent "axe-core@$AXE_VERSION" > /dev/null) \
      && tar -xzf "$packed/axe-core-$AXE_VERSION.tgz" -C "$packed" package/axe.min.js \
      && mkdir -p "$(dirname "$AXE")" && mv "$packed/package/axe.min.js" "$AXE"
    rm -rf "$packed"
  fi
fi
