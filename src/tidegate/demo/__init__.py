"""The tidegate demo: worker processes drain a burst of mixed runs, under limits, on a fresh embedded database.

Run it with `tidegate demo` or `python -m tidegate.demo`. The tasks live in
`tidegate.demo.tasks` so that worker processes can import them like any
user's tasks (`tidegate worker tidegate.demo.tasks:app`).
"""

DEMO_DATABASE = "sqlite:///.tidegate/demo.db"

__all__ = ["DEMO_DATABASE"]
