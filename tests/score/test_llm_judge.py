"""The llm: judge scorer against a real local chat-completions server."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

from tests import servers
from tests.servers import Reply, Sleeps
from tttembed.core.errors import BackendError
from tttembed.score.base import Item, Scorer, get_scorer
from tttembed.score.ledger import scorer_key
from tttembed.score.llm_judge import (
    RUBRIC,
    RUBRIC_HASH,
    JudgeWarning,
    LLMJudge,
    from_spec,
    parse_score,
)

chat_server = servers.chat_server  # the local OpenAI-compatible server fixture

QUERY = Item("q1", "what is the capital of France?")


def doc_text(payload) -> str:
    user = payload["messages"][-1]["content"]
    return user.split("Document:\n", 1)[1].split("\n\nHow relevant", 1)[0]


_MADE: list[LLMJudge] = []


@pytest.fixture(autouse=True)
def _close_judges():
    yield
    while _MADE:
        _MADE.pop().close()


def judge(server, **options) -> LLMJudge:
    options.setdefault("sleep", Sleeps())
    _MADE.append(from_spec(f"judge@{server.url}", **options))
    return _MADE[-1]


@pytest.mark.parametrize(("answer", "value"), [
    ("Score: 4", 4.0),
    ("It matches.\nscore: 3.5", 3.5),
    ("Score: 2 at first glance... on reflection\nScore: 5", 5.0),
    ("**Score:** 4", 4.0),
    ("Score: 4/5", 4.0),
    ("Final Score: 0.", 0.0),
    ("Score: 5 then Score: 9", None),  # the last one counts, and it is out of range
    ("Score: 7", None),
    ("Score: -1", None),
    ("Score: five", None),
    ("I cannot tell.", None),
    ("", None),
    (None, None),
])
def test_parse_score(answer, value):
    assert parse_score(answer) == value


def test_scores_map_to_unit_interval_one_request_per_doc(chat_server):
    grades = {"Paris is the capital of France.": "Direct answer.\nScore: 4",
              "France is in Europe.": "Related.\nScore: 1",
              "Bananas are yellow.": "Unrelated.\nScore: 0"}
    chat_server.chat = lambda payload: grades[doc_text(payload)]
    scorer = judge(chat_server)
    docs = [Item(f"d{i}", text) for i, text in enumerate(grades)]
    out = scorer.score(QUERY, docs)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [0.8, 0.2, 0.0])
    assert chat_server.count("/chat/completions") == 3 == scorer.calls
    payload = chat_server.requests[0].json
    assert payload["model"] == "judge" and payload["temperature"] == 0
    assert payload["messages"][0] == {"role": "system", "content": RUBRIC}
    assert QUERY.text in payload["messages"][1]["content"]
    assert isinstance(scorer, Scorer) and scorer.mapping == "score/5"


def test_last_score_wins_and_decimals(chat_server):
    chat_server.chat = lambda payload: "Score: 1 maybe.\nActually it answers it.\nScore: 3.5"
    out = judge(chat_server).score(QUERY, [Item("d1", "Paris.")])
    np.testing.assert_allclose(out, [0.7])


def test_unparseable_is_retried_once_then_nan_with_warning(chat_server):
    chat_server.chat = lambda payload: "I cannot tell without more context."
    scorer = judge(chat_server)
    with pytest.warns(JudgeWarning) as record:
        out = scorer.score(QUERY, [Item("d1", "a"), Item("d2", "b")])
    assert np.isnan(out).all()
    assert chat_server.count() == 4  # two requests per pair, no more
    messages = sorted(str(w.message) for w in record if w.category is JudgeWarning)
    assert len(messages) == 2
    assert "'q1'" in messages[0] and "'d1'" in messages[0] and "'d2'" in messages[1]


def test_out_of_range_then_valid_uses_the_retry(chat_server):
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def chat(payload):
        text = doc_text(payload)
        with lock:
            seen[text] = seen.get(text, 0) + 1
            first = seen[text] == 1
        if text == "good":
            return "Score: 5"
        return "Score: 9" if first else "Score: 3"

    chat_server.chat = chat
    with warnings.catch_warnings():
        warnings.simplefilter("error", JudgeWarning)
        out = judge(chat_server).score(QUERY, [Item("d1", "retry me"), Item("d2", "good")])
    np.testing.assert_allclose(out, [0.6, 1.0])
    assert chat_server.count() == 3


def test_order_preserved_with_concurrency(chat_server):
    chat_server.chat = lambda payload: f"Score: {int(doc_text(payload)) % 6}"
    docs = [Item(f"d{i}", str(i)) for i in range(12)]
    out = judge(chat_server, max_concurrency=4).score(QUERY, docs)
    np.testing.assert_allclose(out, [(i % 6) / 5 for i in range(12)])
    assert chat_server.count() == 12


def test_http_failures_follow_the_retry_policy(chat_server):
    chat_server.chat = lambda payload: "Score: 2"
    chat_server.script(Reply(503, headers={"Retry-After": "2"}), Reply(500))
    sleeps = Sleeps()
    out = judge(chat_server, sleep=sleeps, max_concurrency=1).score(QUERY, [Item("d1", "x")])
    np.testing.assert_allclose(out, [0.4])
    assert sleeps[0] == 2.0 and len(sleeps) == 2 and chat_server.count() == 3

    chat_server.script(*[Reply(500)] * 3)
    with pytest.raises(BackendError, match="after 3 attempts"):
        judge(chat_server, max_retries=2).score(QUERY, [Item("d1", "x")])

    chat_server.script(Reply(400, body={"error": {"message": "unknown model"}}))
    before = chat_server.count()
    with pytest.raises(BackendError, match="HTTP 400.*unknown model"):
        judge(chat_server).score(QUERY, [Item("d1", "x")])
    assert chat_server.count() == before + 1


def test_malformed_chat_response_is_a_backend_error(chat_server):
    chat_server.script(Reply(body={"choices": []}))
    with pytest.raises(BackendError, match=r"choices\[0\]\.message\.content"):
        judge(chat_server).score(QUERY, [Item("d1", "x")])


def test_empty_docs_and_registry(chat_server, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-judge-SECRET")
    scorer = get_scorer(f"llm:judge@{chat_server.url}", api_key_env="JUDGE_KEY")
    _MADE.append(scorer)
    assert isinstance(scorer, LLMJudge) and scorer.spec == f"llm:judge@{chat_server.url}"
    assert scorer.score(QUERY, []).shape == (0,)
    assert chat_server.count() == 0
    chat_server.chat = lambda payload: "Score: 3"
    scorer.score(QUERY, [Item("d1", "x")])
    assert chat_server.requests[0].headers["authorization"] == "Bearer sk-judge-SECRET"
    assert "SECRET" not in repr(scorer) + repr(scorer.client)


def test_identity_names_what_changes_rewards(chat_server, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-judge-SECRET")
    base = judge(chat_server)
    assert base.identity == f"llm:judge@{chat_server.url} rubric={RUBRIC_HASH}"
    assert len(RUBRIC_HASH) == 12 and int(RUBRIC_HASH, 16) >= 0
    assert isinstance(base, Scorer) and scorer_key(base) == base.identity
    same = judge(chat_server, max_concurrency=1, max_retries=0, timeout=3.0,
                 api_key_env="JUDGE_KEY")
    assert same.identity == base.identity and "SECRET" not in same.identity
    assert judge(chat_server, max_tokens=64).identity == base.identity + " max_tokens=64"
    other = from_spec("other-model@http://127.0.0.1:9/v1/")
    _MADE.append(other)
    assert other.identity == f"llm:other-model@http://127.0.0.1:9/v1 rubric={RUBRIC_HASH}"
    default = from_spec("judge")
    _MADE.append(default)
    assert default.spec == "llm:judge"
    assert default.identity.startswith(f"llm:judge@{default.base_url} ")
    assert default.identity != default.spec and default.base_url.startswith("http")
