"""Temporary: `from .tcp_proxy import ...` in a moved module still finds tests/tcp_proxy.py."""

import sys

from tests import tcp_proxy

sys.modules[f"{__name__}.tcp_proxy"] = tcp_proxy
