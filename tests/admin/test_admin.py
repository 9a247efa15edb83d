"""The admin API: auth on every route, list with pagination and filters, detail, export,
reclaimed originals, delete, store failures and the OpenAPI document. Manual compaction is in
`test_admin_compact.py`."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from proxy.compact import placeholder_for
from proxy.conversation import Conversation
from proxy.session.state import SessionState
from proxy.store import SessionKey, StoreError
from proxy.store.memory import MemoryStore
from tests.support.compacted import (
    ADMIN_KEY,
    CLIENT_KEY,
    Compacted,
    admin_headers,
    compacted_session,
)
from tests.support.fake_upstream import FakeUpstream

SOME_ID = SessionKey("t", "s").id
ROUTES = [
    ("GET", "/admin/savings"),
    ("GET", "/admin/sessions"),
    ("GET", "/admin/sessions/{id}"),
    ("GET", "/admin/sessions/{id}?truncate=true"),
    ("GET", "/admin/sessions/{id}/export"),
    ("POST", "/admin/sessions/{id}/compact"),
    ("GET", "/admin/sessions/{id}/compacted/call_x"),
    ("DELETE", "/admin/sessions/{id}"),
]


def call(proxy: Any, method: str, path: str, **kwargs: Any) -> httpx.Response:
    url = proxy.url + path.format(id=SOME_ID)
    if method == "POST":
        kwargs.setdefault("json", {"mode": "toolcall"})
    return httpx.request(method, url, **kwargs)


def assert_error(resp: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    error: dict[str, Any] = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if code is not None:
        assert error["code"] == code
    return error


@pytest.fixture
def compacted(fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any) -> Compacted:
    return compacted_session(fake_upstream, make_proxy, openai_client)


# -- auth ---------------------------------------------------------------------------------


BAD_AUTHORIZATION = [
    None,
    "Bearer wrong-key",
    f"Basic {ADMIN_KEY}",
    f"Bearer {ADMIN_KEY}x",
    "Bearer",
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_wrong_or_missing_key_is_401(make_proxy: Any, method: str, path: str) -> None:
    proxy = make_proxy(admin_key=ADMIN_KEY)
    for authorization in BAD_AUTHORIZATION:
        headers = {} if authorization is None else {"authorization": authorization}
        resp = call(proxy, method, path, headers=headers)
        error = assert_error(resp, 401, "invalid_admin_key")
        assert "admin key" in error["message"] and resp.headers["www-authenticate"]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_right_key_passes_auth(make_proxy: Any, method: str, path: str) -> None:
    proxy = make_proxy(admin_key=ADMIN_KEY, host="0.0.0.0")
    resp = call(proxy, method, path, headers=admin_headers())
    # Past auth: the list and the savings answer, the unknown session is a 404.
    listing = path in ("/admin/sessions", "/admin/savings")
    assert resp.status_code == (200 if listing else 404), resp.text


@pytest.mark.parametrize(
    ("method", "path"), [*ROUTES, ("GET", "/admin/"), ("GET", "/admin/openapi.json")]
)
def test_no_key_on_a_non_loopback_bind_is_refused(make_proxy: Any, method: str, path: str) -> None:
    proxy = make_proxy(host="0.0.0.0")
    resp = call(proxy, method, path, headers=admin_headers("anything"))
    error = assert_error(resp, 403, "admin_disabled")
    assert "--admin-key" in error["message"] and "0.0.0.0" in error["message"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_no_key_on_loopback_answers_without_auth(make_proxy: Any, host: str) -> None:
    proxy = make_proxy(host=host)
    resp = httpx.get(proxy.url + "/admin/sessions")
    assert resp.status_code == 200 and resp.json()["data"] == []


def test_health_and_metrics_need_no_admin_key(make_proxy: Any) -> None:
    proxy = make_proxy(admin_key=ADMIN_KEY, host="0.0.0.0")
    assert httpx.get(proxy.url + "/healthz").status_code == 200
    assert httpx.get(proxy.url + "/metrics").status_code == 200


# -- list ---------------------------------------------------------------------------------


def run_sessions(proxy: Any, openai_client: Any, names: list[str], key: str) -> list[str]:
    ids = []
    for name in names:
        client = openai_client(proxy, session=name, api_key=key)
        resp = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": f"hello {name}"}]
        )
        ids.append(resp.headers["x-xun-session"])
    return ids


def test_list_rows(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, compacted: Compacted
) -> None:
    resp = httpx.get(compacted.proxy.url + "/admin/sessions", headers=admin_headers())
    page = resp.json()
    assert page["object"] == "list" and page["has_more"] is False and page["next_cursor"] is None
    [row] = page["data"]
    detail = compacted.detail()
    assert row["id"] == compacted.id and row["session"] == "agent-1"
    assert row["tenant"] == detail["tenant"] and CLIENT_KEY not in str(page)
    # The last reply and its tool result have not been sent yet.
    assert row["messages"] == len(compacted.agent.messages) - 2
    assert row["total_tokens"] == detail["total_tokens"] > 0
    assert row["counters"]["summary_rounds"] == 1
    assert row["reclaimed"] == len(detail["reclaimed"]) > 0
    assert row["has_summary"] is True
    assert time.time() - 60 < row["updated_at"] <= time.time()


def test_list_pagination_and_filters(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    proxy = make_proxy(admin_key=ADMIN_KEY)
    mine = run_sessions(proxy, openai_client, ["a", "b", "c"], "sk-tenant-one")
    proxy.settle()  # the last turn's save lands just after its answer
    between = time.time()
    time.sleep(0.01)
    theirs = run_sessions(proxy, openai_client, ["a", "d"], "sk-tenant-two")

    def page(**params: Any) -> dict[str, Any]:
        resp = httpx.get(proxy.url + "/admin/sessions", params=params, headers=admin_headers())
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        return body

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        body = page(**params)
        assert len(body["data"]) <= 2
        seen += [row["id"] for row in body["data"]]
        pages += 1
        cursor = body["next_cursor"]
        assert body["has_more"] is (cursor is not None)
        if cursor is None:
            break
    assert pages == 3 and sorted(seen) == sorted(mine + theirs) and len(set(seen)) == 5
    assert seen == list(reversed(mine + theirs))  # newest first

    tenant = page()["data"][0]["tenant"]
    assert {row["id"] for row in page(tenant=tenant)["data"]} == set(theirs)
    assert {row["id"] for row in page(updated_after=between)["data"]} == set(theirs)
    iso = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(between - 3600))
    assert len(page(updated_after=iso)["data"]) == 5
    assert page(updated_after=time.time() + 60)["data"] == []


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"limit": 100000}, "limit"),
        ({"updated_after": "yesterday"}, "updated_after"),
        ({"updated_after": "2024-01-01T00:00:00"}, "updated_after"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_list_rejects_bad_queries(make_proxy: Any, query: dict[str, Any], param: str) -> None:
    proxy = make_proxy(admin_key=ADMIN_KEY)
    resp = httpx.get(proxy.url + "/admin/sessions", params=query, headers=admin_headers())
    assert assert_error(resp, 400)["param"] == param


# -- detail, export, originals --------------------------------------------------------------


def test_detail_is_the_upstream_view(fake_upstream: FakeUpstream, compacted: Compacted) -> None:
    detail = compacted.detail()
    assert detail["summary"].startswith("## overview\nSummary number 1 of the work")
    assert detail["counters"]["summary_rounds"] == 1
    assert detail["last_compaction"]["level"] == "summary"
    assert [t["compaction"] for t in detail["turns"]] == compacted.levels
    assert all(isinstance(t["total_tokens"], int) for t in detail["turns"])
    assert "view" not in detail["state"] and detail["state"]["cut"] > 0
    # The conversation is what the upstream received on the last turn, message by message.
    sent = [r.json for r in fake_upstream.chat_requests if r.json["messages"][0]["role"]][-1]
    conversation = detail["conversation"]
    assert [m["role"] for m in conversation] == [m["role"] for m in sent["messages"]]
    system = conversation[0]
    assert system["kind"] == "system" and system["content"] == sent["messages"][0]["content"]
    assert system["summary"] == detail["summary"]
    assert system["sections"] == {"client_system_0": compacted.agent.messages[0]["content"]}
    placeholders = [m for m in conversation if m.get("compacted_id")]
    assert len(placeholders) == 6
    for record in placeholders:
        assert record["content"] == placeholder_for(record["compacted_id"])
        assert record["tool_call_id"] == record["compacted_id"]
    tools_sent = [m["content"] for m in sent["messages"] if m["role"] == "tool"]
    assert tools_sent == [m["content"] for m in conversation if m["role"] == "tool"]


def test_detail_truncate(compacted: Compacted) -> None:
    full = compacted.detail()["conversation"]
    cut = compacted.get("", params={"truncate": "true"}).json()["conversation"]
    longest = max(len(m["content"]) for m in full)
    assert longest >= 2000 > max(len(m["content"]) for m in cut)
    assert [m["role"] for m in cut] == [m["role"] for m in full]
    assert_error(compacted.get("", params={"truncate": "perhaps"}), 400)


def test_export_is_the_conversation_dumps(compacted: Compacted) -> None:
    resp = compacted.get("/export")
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    assert compacted.id in resp.headers["content-disposition"]
    conv = Conversation.loads(resp.text)
    assert conv.to_history() == [
        {"role": m["role"], "content": m["content"]} for m in compacted.detail()["conversation"]
    ]
    assert len(conv.reclaimed_keys()) == 6


def test_compacted_original(compacted: Compacted) -> None:
    detail = compacted.detail()
    for record in [m for m in detail["conversation"] if m.get("compacted_id")]:
        resp = compacted.get(f"/compacted/{record['compacted_id']}")
        assert resp.status_code == 200
        body = resp.json()
        assert body["reclaimed"] is True
        assert body["text"] == body["content"] == compacted.tool_output(record["compacted_id"])
    assert_error(compacted.get("/compacted/call_unknown"), 404, "tool_result_not_found")


@pytest.mark.parametrize("session_id", [SOME_ID, "not-an-id", "x" * 22])
def test_unknown_session_is_404(make_proxy: Any, session_id: str) -> None:
    proxy = make_proxy(admin_key=ADMIN_KEY)
    for path in ("", "/export", "/compacted/c"):
        url = f"{proxy.url}/admin/sessions/{session_id}{path}"
        assert_error(httpx.get(url, headers=admin_headers()), 404)


def test_delete(compacted: Compacted, openai_client: Any) -> None:
    url = f"{compacted.proxy.url}/admin/sessions/{compacted.id}"
    resp = httpx.delete(url, headers=admin_headers())
    assert resp.json() == {"id": compacted.id, "object": "session.deleted", "deleted": True}
    assert_error(httpx.get(url, headers=admin_headers()), 404)
    assert_error(httpx.delete(url, headers=admin_headers()), 404)
    listing = httpx.get(compacted.proxy.url + "/admin/sessions", headers=admin_headers())
    assert listing.json()["data"] == []


async def test_state_without_kept_messages(make_proxy: Any) -> None:
    store = MemoryStore()
    key = SessionKey("tenant", "no-view")
    await store.put(key, SessionState(total_tokens=5).to_bytes(), {}, expected_version=None)
    proxy = make_proxy(admin_key=ADMIN_KEY, store=store)
    base = f"{proxy.url}/admin/sessions/{key.id}"
    async with httpx.AsyncClient(headers=admin_headers()) as client:
        detail = (await client.get(base)).json()
        assert detail["conversation"] is None and detail["total_tokens"] == 5
        for resp in (
            await client.get(base + "/export"),
            await client.get(base + "/compacted/x"),
            await client.post(base + "/compact", json={"mode": "toolcall"}),
        ):
            assert_error(resp, 409, "conversation_not_kept")


class BrokenStore(MemoryStore):
    async def list(self, **kwargs: Any) -> Any:
        raise StoreError("down")

    async def get_by_id(self, session_id: str) -> Any:
        raise StoreError("down")


def test_store_failure_is_503(make_proxy: Any) -> None:
    proxy = make_proxy(admin_key=ADMIN_KEY, store=BrokenStore())
    for method, path in ROUTES:
        assert_error(call(proxy, method, path, headers=admin_headers()), 503, "store_unavailable")
    assert "xun_store_errors_total 8.0" in httpx.get(proxy.url + "/metrics").text


# -- schema and page ----------------------------------------------------------------------


def test_openapi_document_covers_every_route(make_proxy: Any) -> None:
    proxy = make_proxy(admin_key=ADMIN_KEY)
    doc = httpx.get(proxy.url + "/admin/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    operations = {(method.upper(), path) for path, item in doc["paths"].items() for method in item}
    expected = {(m, p.split("?")[0].replace("call_x", "{tool_call_id}")) for m, p in ROUTES}
    assert operations == expected
    body = doc["paths"]["/admin/sessions/{id}/compact"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    assert set(schema["properties"]["mode"]["enum"]) == {"summary", "toolcall"}
    params = {p["name"] for p in doc["paths"]["/admin/sessions"]["get"]["parameters"]}
    assert params == {"limit", "cursor", "tenant", "updated_after"}


def test_viewer_page_is_served_offline(make_proxy: Any) -> None:
    proxy = make_proxy(admin_key=ADMIN_KEY)
    redirect = httpx.get(proxy.url + "/admin")
    assert redirect.status_code == 307 and redirect.headers["location"].endswith("/admin/")
    page = httpx.get(proxy.url + "/admin/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for asset in ("app.js", "chart.js", "markdown.js", "style.css"):
        assert f"static/{asset}" in page.text
        resp = httpx.get(f"{proxy.url}/admin/static/{asset}")
        assert resp.status_code == 200 and resp.text
        text = resp.text.replace('"http://www.w3.org/2000/svg"', "")  # a name, not a fetch
        assert "http://" not in text and "https://" not in text  # nothing from a CDN
