"""The HTTP service: a FastAPI application over a tidegate App (interface layer, beside cli/).

Imported only by `tidegate serve` and `App.asgi()`, so `import tidegate` never
imports FastAPI (an optional extra: `pip install tidegate[service]`).
"""

from tidegate.api.application import create_api
from tidegate.api.security import Tokens, check_bind

__all__ = ["Tokens", "check_bind", "create_api"]
