#!/usr/bin/env bash
# One sitting for benchmarks/results/peers.md: pgqueuer, procrastinate and two tidegate versions
# (before and after a change), interleaved rep by rep so that the machine's drift hits all alike.
# Each version is a source tree (git archive) installed, not editable, in its own venv with the
# peers: /tmp/bp-base (BASE_SRC) and /tmp/bp-new (NEW_SRC), e.g.
#   git archive b39b0ef | tar -x -C /tmp/tg-base
#   python3 -m venv /tmp/bp-base && /tmp/bp-base/bin/pip install pgqueuer procrastinate asyncpg 'psycopg[binary]' /tmp/tg-base
# then: BASE_SRC=/tmp/tg-base NEW_SRC=/tmp/tg-new bash benchmarks/peers_sitting.sh   (about 16 minutes)
# and:  python benchmarks/peers_table.py /tmp/peers-sitting
set -uo pipefail
BASE_SRC=${BASE_SRC:?the source tree of the version before}
NEW_SRC=${NEW_SRC:?the source tree of the version after}
cd "${PEERS:-$(dirname "$0")/../../shared/bench-peers}"
OUT=${OUT:-/tmp/peers-sitting}
mkdir -p "$OUT"
REPS=${REPS:-3}
run() { local py=$1; shift; timeout 300 env PATH="$(dirname "$py"):$PATH" "$py" "$@" 2>>"$OUT"/stderr.log || echo "run failed ($?): $*" >> "$OUT"/failures.log; }
for r in $(seq 1 "$REPS"); do
  echo "rep $r $(date -u +%T)" >> "$OUT"/progress.log
  run /tmp/bp-new/bin/python bench_pgqueuer.py w1 --w1-limit 0 --out "$OUT"/pgqueuer.jsonl
  for v in base new; do run /tmp/bp-$v/bin/python bench_tidegate.py w1free --backend postgres --out "$OUT"/tidegate-$v.jsonl; done
  for v in base new; do run /tmp/bp-$v/bin/python bench_tidegate.py w1free --backend sqlite --out "$OUT"/tidegate-$v-sqlite.jsonl; done
  run /tmp/bp-new/bin/python bench_pgqueuer.py w1 --out "$OUT"/pgqueuer.jsonl
  run /tmp/bp-new/bin/python bench_procrastinate.py w1 --out "$OUT"/procrastinate.jsonl
  for v in base new; do run /tmp/bp-$v/bin/python bench_tidegate.py w1 --backend postgres --out "$OUT"/tidegate-$v.jsonl; done
  for w in w2 w3; do
    run /tmp/bp-new/bin/python bench_pgqueuer.py $w --out "$OUT"/pgqueuer.jsonl
    run /tmp/bp-new/bin/python bench_procrastinate.py $w --out "$OUT"/procrastinate.jsonl
    for v in base new; do run /tmp/bp-$v/bin/python bench_tidegate.py $w --backend postgres --out "$OUT"/tidegate-$v.jsonl; done
  done
  for v in base new; do run /tmp/bp-$v/bin/python bench_tidegate.py w3 --backend postgres --procs 2 --out "$OUT"/tidegate-$v.jsonl; done
  ( cd "$BASE_SRC"/benchmarks && timeout 300 /tmp/bp-base/bin/python throughput.py --runs 5000 --repeat 1 --backends sqlite > "$OUT"/throughput-base-$r.txt 2>&1 )
  ( cd "$NEW_SRC"/benchmarks && timeout 300 /tmp/bp-new/bin/python throughput.py --runs 5000 --repeat 1 --backends sqlite > "$OUT"/throughput-new-$r.txt 2>&1 )
done
echo "done $(date -u +%T)" >> "$OUT"/progress.log
