"""The savings report: what the proxy saved over a time window, from any store.

`report` reads the hourly totals each session keeps in its state (`proxy.session.savings_record`)
for the sessions updated in the window, and adds them up: in all, by group (`session`,
`model` or `tenant`), per hour (`series`), and the shadow turns' projected savings apart.
Hours are the unit: a window takes every hour it starts in. Beside them, `lookback`: what
the models of those sessions asked back of what compaction took, by tool name.
`GET /admin/savings` answers it as JSON and `xun-proxy report` prints it
(`proxy.admin.report_cli`); `session_savings` is one session's own totals, for its detail.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.admin.base import authorize, query_model, session_store, settled, store_failed
from proxy.admin.times import parse_age, parse_time
from proxy.compaction.prices import Prices
from proxy.errors import InvalidRequest
from proxy.session import asked_back
from proxy.session.identity import session_header
from proxy.session.savings_record import EARLIER, HOUR, PriceOf, Tally, split_key
from proxy.session.state import SessionState
from proxy.store import SessionInfo, Store, StoreError

By = Literal["session", "model", "tenant"]
BY: tuple[By, ...] = ("session", "model", "tenant")
PAGE = 500


def when(value: str | None, *, now: float, naive_is_utc: bool) -> float | None:
    """A window's end as operators write it: `24h` (that long ago), ISO 8601 or epoch seconds."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text[-1:].lower() in ("s", "m", "h", "d", "w") and text[:-1].replace(".", "", 1).isdigit():
        return now - parse_age(text)
    return parse_time(text, naive_is_utc=naive_is_utc)


def iso(stamp: float | None) -> str | None:
    return None if stamp is None else datetime.fromtimestamp(stamp, UTC).isoformat()


def _row(tally: Tally) -> dict[str, Any]:
    return {**tally.totals(), "projected": tally.projected()}


def session_savings(state: SessionState, price_of: PriceOf) -> dict[str, Any]:
    """A session's totals over every turn it kept counts of."""
    tally = Tally()
    for key, vec in state.savings.items():
        tally.add(split_key(key)[1], vec, price_of)
    return _row(tally)


def _group_key(by: By, info: SessionInfo, model: str) -> str:
    if by == "model":
        return model or "unknown"
    return info.key.tenant if by == "tenant" else info.id


async def _sessions(store: Store, since: float | None) -> list[tuple[SessionInfo, SessionState]]:
    found: list[tuple[SessionInfo, SessionState]] = []
    cursor: str | None = None
    while True:
        infos, cursor = await store.list(updated_after=since, limit=PAGE, cursor=cursor)
        for info in infos:
            stored = await store.get_by_id(info.id)  # past a cache: hot states stay in it
            if stored is None or stored.damaged:
                continue  # deleted meanwhile, or damaged since it was listed
            try:
                state = SessionState.from_bytes(stored.data)
            except (ValueError, TypeError):
                continue  # a damaged state: nothing to count
            found.append((info, state))
        if cursor is None:
            return found


async def report(
    store: Store,
    price_of: PriceOf,
    *,
    since: float | None = None,
    until: float | None = None,
    by: By = "model",
    now: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """The savings of the sessions in `store` between `since` and `until` (epoch seconds)."""
    end = now() if until is None else until
    start = None if since is None else int(since // HOUR) * HOUR
    # A session's turns in the window made it updated after the window's first hour began.
    sessions = await _sessions(store, None if start is None else start - 1)
    totals, groups, hours = Tally(), dict[str, Tally](), dict[int, Tally]()
    labels: dict[str, dict[str, Any]] = {}
    asked = AskedBack()  # what the models asked back, over the sessions in the window
    for info, state in sessions:
        if state.lookback or state.searches:
            asked.add(state)
        for key, vec in state.savings.items():
            hour, model = split_key(key)
            if start is not None and (hour == EARLIER or hour < start):
                continue
            if hour >= end:
                continue
            name = _group_key(by, info, model)
            totals.add(model, vec, price_of)
            groups.setdefault(name, Tally()).add(model, vec, price_of)
            if hour != EARLIER:
                hours.setdefault(hour, Tally()).add(model, vec, price_of)
            if by == "session":
                labels[name] = {
                    "session": session_header(info.key.session),
                    "tenant": info.key.tenant,
                    "wire": info.meta.get("wire") or "chat",
                }
    rows = [{"key": name, **labels.get(name, {}), **_row(t)} for name, t in groups.items()]
    rows.sort(key=lambda row: (-row["tokens_saved"], row["key"]))
    return {
        "object": "savings",
        "since": iso(since),
        "until": iso(end),
        "by": by,
        "totals": totals.totals(),
        "groups": rows,
        "series": [
            {"t": hour, "time": iso(hour), **hours[hour].totals()} for hour in sorted(hours)
        ],
        "projected": totals.projected(),
        "lookback": asked.totals(),
    }


class AskedBack:
    """Look-back counts (`proxy.session.asked_back`) added up over sessions, by tool name."""

    def __init__(self) -> None:
        self.tools: dict[str, list[int]] = {}
        self.searches = [0, 0]
        self.sessions = 0

    def add(self, state: SessionState) -> None:
        self.sessions += 1
        tools, searches = asked_back.clean_counts(state.lookback, state.searches)
        for name, row in tools.items():
            kept = self.tools.setdefault(name, [0, 0, 0])
            for i, n in enumerate(row[:3]):
                kept[i] += n
        for i, n in enumerate(searches[:2]):
            self.searches[i] += n

    def totals(self) -> dict[str, Any]:
        """Per tool: reclaimed, reads, re-runs and their rate; the searches; the sessions."""
        found = asked_back.table(self.tools, self.searches, learning=False)
        rows = [{k: v for k, v in row.items() if k != "policy"} for row in found["tools"]]
        return {"sessions": self.sessions, "tools": rows, "searches": found["searches"]}


# -- the route -------------------------------------------------------------------------------


class SavingsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    since: str | None = Field(
        None, description="window start: an age (24h, 7d), ISO 8601 with offset, or epoch"
    )
    until: str | None = Field(None, description="window end, as since (default: now)")
    by: By = Field("model", description="group by session, model or tenant")


def price_table(request: Request) -> PriceOf:
    prices: PriceOf | None = getattr(request.app.state, "prices", None)
    return prices if prices is not None else Prices(request.app.state.settings.prices)


async def savings_endpoint(request: Request) -> Response:
    """GET /admin/savings: the report as JSON."""
    authorize(request)
    query = query_model(request, SavingsQuery)
    now = time.time()
    bounds: dict[str, float | None] = {}
    for name in ("since", "until"):
        try:
            bounds[name] = when(getattr(query, name), now=now, naive_is_utc=False)
        except ValueError as exc:
            raise InvalidRequest(str(exc), param=name, code="invalid_time") from exc
    await settled(request)
    try:
        body = await report(
            session_store(request),
            price_table(request),
            since=bounds["since"],
            until=bounds["until"],
            by=query.by,
            now=lambda: now,
        )
    except StoreError as exc:
        raise store_failed(request, exc) from exc
    return JSONResponse(body)


__all__ = [
    "BY",
    "By",
    "SavingsQuery",
    "iso",
    "report",
    "savings_endpoint",
    "session_savings",
    "when",
]
