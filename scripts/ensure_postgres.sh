#!/usr/bin/env bash
# Make sure the local PostgreSQL the tests use is up (start it if it is installed
# but stopped). The PostgreSQL suite is required: in CI, failing to reach it fails.
set -uo pipefail
HOST="${TIDEGATE_TEST_PG_HOST:-127.0.0.1}"
if pg_isready -q -h "$HOST" -p 5432 2>/dev/null; then
  exit 0
fi
if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
  for version in $(ls /etc/postgresql); do
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  done
  for _ in $(seq 1 30); do
    pg_isready -q -h "$HOST" -p 5432 && exit 0
    sleep 1
  done
fi
echo "PostgreSQL is not reachable on $HOST:5432" >&2
if [ "${CI:-}" = "true" ]; then
  exit 1
fi
echo "(outside CI the PostgreSQL tests will be skipped)" >&2
exit 0
