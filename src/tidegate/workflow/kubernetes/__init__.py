"""Steps as Kubernetes Jobs: `Executor.kubernetes(...)`.

`spec` is what the user declared; `jobs` builds a step's Job and names it;
`judge` reads a Job's and its pod's status as an outcome; `cluster` is the
only module that calls the Kubernetes client; `watcher` follows a run's Jobs
and pods (watch with resource versions, plus a slow backstop re-list);
`runner` starts, adopts and deletes a run attempt's Jobs. The pod side is
`tidegate.steppod`.
"""
