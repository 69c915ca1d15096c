"""The bodies of `/api/v1/rates` (named rates): what is read and what a live change sends."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr


class RateWindow(BaseModel):
    """One window of a rate: at most `limit` starts (cost units) in any `per` seconds, `burst` at once."""

    limit: int
    per: float
    burst: int


class NamedRate(BaseModel):
    """A named rate: its windows in force (each must allow a start), where they come from, and the
    steps of live attempts waiting for it."""

    name: str
    scope: str = Field(description="Its scope key: `rate:@NAME` (states and audit).")
    rates: list[RateWindow]
    label: str = Field(description="The windows as surfaces show them: `100/1s, 5000/1h`.")
    source: str | None = Field(description="`code` (App.set_rate_limit) or `override` (a live change).")
    code_rates: str | None = Field(description="The code's windows, shown beside an override.")
    updated_at: datetime | None
    waiting: int


class NamedRateList(BaseModel):
    rates: list[NamedRate]


class NamedRateReset(BaseModel):
    """What a reset leaves: the code's rate, or null when the code declares none (the rate is gone)."""

    rate: NamedRate | None


class NamedRateUpdate(BaseModel):
    """Create a named rate or change its window, live: waiting steps are woken at once."""

    model_config = ConfigDict(extra="forbid", strict=True)

    limit: StrictInt = Field(description="Starts (cost units) at most in any window; at least 1.")
    per: StrictStr = Field(description="The window's length: `1s`, `1m`, `1h30m`.")
    burst: StrictInt | None = Field(default=None, description="Most starts at one instant (default: limit/20, >= 1).")
