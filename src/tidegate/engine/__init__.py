"""The engine: what tidegate does over the Store port, in two rooms.

- `operators/`: what an operator sees and does (why a run waits, limits, queues, runs,
  workers, schedules, events, pools, sweep, retention, schema, doctor). The CLI, the API
  and the dashboard reach the store only through these services, so the three faces
  cannot drift apart; each reads through the port and decides with the pure domain
  policy, so a surface explains runs exactly as claims decide them.
- `runtime/`: the pieces a worker and a workflow run with (the pool guard and its held
  slots, firing schedules, cron, child triggers, tracing).

Operators may use runtime pieces (a resume reads the cron); runtime never uses operators.
"""
