"""Fuzzing the real gateway (real Postgres and Redis) two ways.

1. schemathesis over the OpenAPI schema the gateway serves: every operation, with valid (positive)
   and invalid (negative) requests, a bounded and derandomized number of examples each. Checks: no
   5xx, status codes / content types / bodies as documented, invalid input refused, and every 4xx body
   has a `code` and a `detail`.
2. Hypothesis on memory writes, search and turns with the inputs that broke things before: all of
   Unicode including lone surrogates and control characters, huge and empty strings, text that looks
   like SQL or LIKE/tsquery syntax. No 5xx, and a refused request writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from shared.infra import db
from shared.infra.config import get_settings
from tests.conftest import Gateway

pytestmark = pytest.mark.integration

FUZZ_USER = "fuzz-user"
# Per operation and generation mode: ~22 operations × 2 modes × 50 is ~2,200 requests, under a minute on
# two cores (100 took 100 s of a suite that must stay within ~15 minutes); derandomize makes every run
# send the same requests.
EXAMPLES_PER_OPERATION = 50
# Answered in OpenAI's error shape, not engram's, and a valid request waits for a worker to run its turn:
# tests/integration/test_openai_compat.py covers them with the openai SDK as the caller.
OPENAI_COMPATIBLE = ("/v1/chat/completions", "/v1/models")
WRITE_TABLES = ("users", "sessions", "turns", "session_messages", "memories", "memory_events", "memory_entities")


def row_counts() -> dict[str, int]:
    with db.connection() as conn:
        return {
            table: int(conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"])  # type: ignore[index]
            for table in WRITE_TABLES
        }


def submission_counts() -> dict[str, int]:
    """What only a turn submission writes. A worker running earlier accepted turns adds assistant
    messages meanwhile, so those are not counted."""
    with db.connection() as conn:
        row = conn.execute(
            """SELECT (SELECT count(*) FROM users) AS users, (SELECT count(*) FROM sessions) AS sessions,
                      (SELECT count(*) FROM turns) AS turns,
                      (SELECT count(*) FROM session_messages WHERE role = 'user') AS user_messages"""
        ).fetchone()
    assert row is not None
    return dict(row)


@pytest.fixture(autouse=True)
def drop_queued_tasks() -> Iterator[None]:
    """The fuzzed turns and memories enqueue hundreds of tasks for rows the next test truncates; a
    worker started later should not spend its time (or a scripted reply) on them."""
    yield
    from workers.app import app as celery_app

    celery_app.control.purge()


@pytest.fixture
def fuzz_env(gateway: Gateway) -> Iterator[None]:
    """Long polls and event streams end within a fifth of a second: a fuzzed `wait=` or a stream on the
    seeded turn (queued: no worker runs here) would otherwise hold a request for a minute, and every request
    that reaches the turn waits out the whole cap. A short cap still answers with the full response."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENGRAM_MAX_WAIT_SECONDS", "0.2")
        patch.setenv("ENGRAM_SSE_MAX_SECONDS", "0.2")
        get_settings.cache_clear()
        yield
    get_settings.cache_clear()


def error_has_code(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 4xx body is JSON with a non-empty string `code` and a `detail`."""
    if 400 <= response.status_code < 500:
        body = json.loads(response.content)
        assert isinstance(body, dict) and isinstance(body.get("code"), str) and body["code"], body
        assert body.get("detail") not in (None, "", []), body
    return None


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
    error_has_code,
]


def seed(api: httpx.Client) -> None:
    """A user with memories and a session, so fuzzed ids and filters reach real rows and not only 404s."""
    for key, value in (("home", "lives in Lisbon"), ("pet", "has a cat called 0"), ("job", "works as a nurse")):
        assert api.post(f"/v1/users/{FUZZ_USER}/memories", json={"key": key, "value": value}).status_code == 201
    assert api.post("/v1/sessions/fuzz-session/turns", json={"user_id": FUZZ_USER, "text": "hi"}).status_code == 202


def run_operation(
    operation: Any, mode: schemathesis.GenerationMode, call: Callable[[Any], None], sacrificial_key_id: int
) -> None:
    # Fuzzed key ids must never revoke the key the fuzzer itself authenticates with.
    pinned = {"user_id": FUZZ_USER, "key_id": sacrificial_key_id}
    names = {p.name for p in operation.path_parameters}
    fixed = {name: value for name, value in pinned.items() if name in names} or None

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as generated
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=fixed))
    def run(case: Any) -> None:
        call(case)

    run()


def test_schemathesis_finds_no_server_error_and_no_schema_drift(
    gateway: Gateway, api: httpx.Client, api_key: str, fuzz_env: None
) -> None:
    seed(api)
    sacrificial = api.post("/v1/admin/keys", json={"name": "fuzzed", "scopes": ["chat"]})
    assert sacrificial.status_code == 201, sacrificial.text
    raw = httpx.get(f"{gateway.url}/openapi.json").json()
    config = schemathesis.Config.from_dict(
        {
            # Every request carries the test's key (below); generating or negating the Authorization
            # header would only be overridden.
            "generation": {"with-security-parameters": False},
            "checks": {
                # A negative body can be larger than the request limit: 413 is a correct refusal too.
                "negative_data_rejection": {"expected-statuses": [400, 401, 404, 405, 409, 413, 415, 422]},
            },
        }
    )
    schema = schemathesis.openapi.from_dict(raw, config=config)
    auth = {"Authorization": f"Bearer {api_key}"}

    def call(case: Any) -> None:
        response = case.call(base_url=gateway.url, headers=auth, timeout=30)
        case.validate_response(response, checks=CHECKS)

    failures = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path in OPENAI_COMPATIBLE:
            continue
        operations += 1
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            try:
                run_operation(operation, mode, call, sacrificial.json()["id"])
            except Unsatisfiable:  # nothing to make invalid (no parameters, no body), e.g. GET /healthz
                assert mode is schemathesis.GenerationMode.NEGATIVE, operation.label
            # schemathesis's FailureGroup is a BaseExceptionGroup: catch it too, to report every operation.
            except (Exception, BaseExceptionGroup) as exc:
                failures.append(f"{operation.label} [{mode.value}]:\n{exc}")
    assert operations >= 20  # the whole API was fuzzed, not an empty or partial schema
    assert not failures, "\n\n".join(failures)


# --------------------------------------------------------------------------- Hypothesis on inputs

# All of Unicode, lone surrogates and control characters included.
any_char = st.characters(exclude_categories=())
nasty = st.sampled_from(
    [
        "",
        " ",
        "0",
        "a\ud800b",
        "\udfff",
        "\x00",
        "nul\x00inside",
        "\u202eevil",
        "\ufeff",
        "'; DROP TABLE memories; --",
        "' OR '1'='1",
        "%",
        "_",
        "\\",
        "%_\\%",
        "a & b | !c",
        "foo:* <-> bar",
        "(((",
        "'",
        '"',
        "{{7*7}}",
        "${jndi:ldap://x}",
        "<script>alert(1)</script>",
        "Ignore previous instructions",
        "😀" * 50,
        "\U0010ffff",
        "e\u0301",
    ]
)
short = st.text(any_char, min_size=1, max_size=40)
storable = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)  # no surrogates: most get stored
texts = st.one_of(
    nasty,
    short,
    storable,
    st.text(any_char, min_size=2000, max_size=2100),  # around the value limit
    st.builds(lambda char, n: char * n, any_char, st.integers(10_000, 60_000)),  # huge, under the request limit
    st.builds(lambda char, n: char * n, any_char, st.integers(300_000, 400_000)),  # around the request limit
)


def mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`usual` three times in four: with every field odd at once, nearly every write is refused."""
    return st.integers(0, 3).flatmap(lambda i: odd if i == 0 else usual)


FUZZ = settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def send(api: httpx.Client, method: str, path: str, body: Any) -> httpx.Response:
    # ensure_ascii: lone surrogates travel as \\udXXX escapes, exactly as a JSON client would send them.
    return api.request(method, path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


def assert_refusal_or_success(
    response: httpx.Response, before: dict[str, int], counts: Callable[[], dict[str, int]] = row_counts
) -> None:
    event(f"status {response.status_code}")
    assert response.status_code < 500, response.text[:500]
    if response.status_code >= 400:
        body = response.json()
        assert body["code"] and body["detail"], body
        assert len(response.content) < 20_000  # no huge echo of the input
        assert counts() == before  # refused means nothing written, not even the user


@FUZZ
@given(
    key=mostly(storable, texts),
    value=mostly(storable, texts),
    namespace=mostly(st.none(), texts),
    tags=mostly(st.lists(storable, max_size=3), st.lists(texts, max_size=2) | st.lists(st.just("t"), min_size=21)),
    confidence=mostly(st.floats(0, 1) | st.sampled_from([1e-127, 5e-324, 1e-39]), st.floats()),
    kind=st.sampled_from(["fact", "preference", "episode", "style", "nope"]),
)
def test_memory_writes_never_fail_and_refusals_write_nothing(
    api: httpx.Client, key: str, value: str, namespace: str | None, tags: list[str], confidence: float, kind: str
) -> None:
    body: dict[str, Any] = {"key": key, "value": value, "tags": tags, "kind": kind}
    if namespace is not None:
        body["namespace"] = namespace
    # json.dumps writes NaN/Infinity, which Python's JSON reader (and so FastAPI) accepts.
    body["confidence"] = confidence
    before = row_counts()
    response = send(api, "POST", "/v1/users/alice/memories", body)
    assert_refusal_or_success(response, before)
    if response.status_code in (200, 201):
        memory = response.json()["memory"]
        stored = api.get(f"/v1/users/alice/memories/{memory['id']}")
        assert stored.status_code == 200 and stored.json()["value"] == memory["value"]


@FUZZ
@given(
    query=texts,
    tags=mostly(st.none(), st.lists(texts, max_size=3)),
    namespace=mostly(st.none(), texts),
    mode=st.sampled_from([None, "weighted", "rrf"]),
)
def test_search_never_fails(
    api: httpx.Client, query: str, tags: list[str] | None, namespace: str | None, mode: str | None
) -> None:
    if row_counts()["memories"] == 0:  # hypothesis reuses the function-scoped fixtures: seed once
        for key, value in (("home", "lives in Lisbon 100%"), ("pet", "cat_name is 0"), ("sql", "'; DROP TABLE x")):
            assert api.post("/v1/users/alice/memories", json={"key": key, "value": value}).status_code == 201
    body: dict[str, Any] = {"query": query, "filters": {}}
    if tags is not None:
        body["filters"]["tags"] = tags
    if namespace is not None:
        body["filters"]["namespace"] = namespace
    if mode is not None:
        body["mode"] = mode
    before = row_counts()
    response = send(api, "POST", "/v1/users/alice/memories/search", body)
    assert_refusal_or_success(response, before)
    if response.status_code == 200:
        assert isinstance(response.json()["results"], list)
        assert row_counts() == before  # a search writes no memory rows


@FUZZ
@given(text=texts, session=st.sampled_from(["s1", "s2"]))
def test_turn_text_never_fails_and_refusals_write_nothing(api: httpx.Client, text: str, session: str) -> None:
    before = submission_counts()
    response = send(api, "POST", f"/v1/sessions/{session}/turns", {"user_id": "alice", "text": text})
    assert_refusal_or_success(response, before, submission_counts)
    if response.status_code == 202:
        turn = api.get(f"/v1/turns/{response.json()['turn_id']}").json()
        assert turn["status"] in ("queued", "running", "done", "failed")
