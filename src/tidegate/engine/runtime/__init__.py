"""Runtime pieces: what workers and workflows run with, beside the worker loop itself."""
