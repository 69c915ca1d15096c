"""Prometheus metrics a worker process exposes (served by whatever exporter the user runs)."""

from __future__ import annotations

from prometheus_client import Counter

OVERFLOW_SIGNALS = Counter(
    "tidegate_capacity_overflow_total",
    "Times this process raised the overflow signal: eligible runs waited while every worker was full.",
)
