#!/usr/bin/env bash
# Create .venv (if needed) and install tidegate with what a purpose needs.
# Usage: scripts/setup.sh [test|demo]   (default: test)
#   test: the package with its test tools ([test], which brings [service], [kubernetes] and [docs]),
#         Debian's chromium (as root) and axe-core for the browser tests.
#   demo: the package alone (the demo needs no extra), quietly, with one line saying so; no browser.
# Idempotent: re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PURPOSE="${1:-test}"
PYTHON="${PYTHON:-python3}"
case "$PURPOSE" in
  test) TARGET=".[test]"; PIP_OPTIONS=() ;;
  demo) TARGET="."; PIP_OPTIONS=(--no-compile) ;;  # byte-compile on first import: only what the demo runs
  *) echo "setup.sh: unknown purpose '$PURPOSE' (use test or demo)" >&2; exit 2 ;;
esac

install() {
  if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
  fi
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "${PIP_OPTIONS[@]}" -e "$TARGET"
}

if [ "$PURPOSE" = demo ]; then
  # pip's own output (and its warnings) only if it fails: the demo's first screen is the demo.
  if ! .venv/bin/python -c "import tidegate" 2>/dev/null || [ pyproject.toml -nt .venv/.tidegate-demo ]; then
    echo "Setting up .venv with tidegate (the package only; ./scripts/test.sh adds the test tools)..."
    log="$(mktemp)"
    if ! install > "$log" 2>&1; then
      cat "$log" >&2
      rm -f "$log"
      exit 1
    fi
    rm -f "$log"
    touch .venv/.tidegate-demo
  fi
  exit 0
fi

install
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
# The PgBouncer suite (tests/pooler/) starts Debian's pgbouncer in transaction mode in front of the test PostgreSQL.
if ! command -v pgbouncer > /dev/null && [ ! -x /usr/sbin/pgbouncer ] && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q pgbouncer > /dev/null || { apt-get update -q > /dev/null && apt-get install -y -q pgbouncer > /dev/null; }
fi
