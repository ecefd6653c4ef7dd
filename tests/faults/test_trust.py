"""No silent wrong result: a manifest that cannot prove its corpus is refused, rewards that
carry no signal make no state, a rerank answer that is not one score per document sent
is refused (and nothing of it reaches the ledger)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from tests.cli.test_cli import CORPUS, QRELS, QUERIES, _write_beir, index_and_learn
from tests.servers import LocalOpenAIServer, Reply
from tttembed.cli import app
from tttembed.core.errors import BackendError, StateMismatch
from tttembed.score.base import Item, get_scorer
from tttembed.score.ledger import Ledger, LedgerScorer


@pytest.fixture()
def folder(tmp_path, minilm):
    """A BEIR folder, its index and a task-wise state learned on it (CLI, bundled MiniLM)."""
    data = tmp_path / "data"
    _write_beir(data, CORPUS, QUERIES, QRELS)
    return (data, *index_and_learn(data, tmp_path))


def test_a_state_without_its_corpus_fingerprint_is_refused(folder, tmp_path):
    """A state whose manifest lacks its corpus fingerprint (hand-made, edited, older) is
    refused by search with a one-line error naming the missing field; with
    --allow-foreign-state it is applied."""
    import tttembed.api as tt

    data, idx, state_file = folder
    bare = replace(tt.load_state(state_file), corpus_fingerprint="")
    bare.save(tmp_path / "bare.npz")
    with pytest.raises(StateMismatch, match="has no corpus_fingerprint"):
        tt.search(tt.open_index(idx), data, states=[tmp_path / "bare.npz"])
    runner = CliRunner()
    args = ["search", str(data), "--index", str(idx), "--state", str(tmp_path / "bare.npz"),
            "--out", str(tmp_path / "run.trec")]
    r = runner.invoke(app, args)
    assert r.exit_code == 1 and "has no corpus_fingerprint" in r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert not (tmp_path / "run.trec").exists()
    r = runner.invoke(app, args + ["--allow-foreign-state"])
    assert r.exit_code == 0, r.output


def test_an_index_manifest_without_its_fingerprint_cannot_prove_a_match(folder):
    """An index whose manifest has no corpus fingerprint cannot prove that a state was
    learned on its corpus: the state is refused, the message names the index's manifest."""
    import tttembed.api as tt

    data, idx, state_file = folder
    index = tt.open_index(idx)
    index.manifest.pop("corpus_fingerprint")
    with pytest.raises(StateMismatch, match=r"index .*'s manifest has no corpus_fingerprint"):
        tt.search(index, data, states=[state_file])


def test_judgments_matching_no_candidate_make_no_state(folder, tmp_path):
    """A qrels: file whose pairs match none of the candidates gives rewards that are all
    equal: learn exits 1 with one line naming the file and the reason, and writes no state."""
    data, idx, _ = folder
    foreign = tmp_path / "foreign.tsv"
    foreign.write_text("query-id\tcorpus-id\tscore\nq1\tnope\t1\nq2\tgone\t2\n")
    r = CliRunner().invoke(app, ["learn", str(data), "--index", str(idx), "--scorer",
                                 f"qrels:{foreign}", "--budget", "3",
                                 "--out", str(tmp_path / "s.npz")])
    assert r.exit_code == 1, r.output
    assert str(foreign) in r.output and "no query received two different rewards" in r.output
    assert "all 6 rewards are 0" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "s.npz").exists()


@pytest.mark.parametrize("body, why", [
    ({"results": [{"index": 0, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1},
                  {"index": 1, "relevance_score": 0.5}]}, "3 results for the 2 documents"),
    ({"results": [{"index": 0, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]},
     "index 0 answered twice"),
    ({"results": [{"index": 0, "relevance_score": "0.9"}, {"index": 1, "relevance_score": 0.1}]},
     "'0.9' of index 0 is not a number"),
    ({"results": [{"index": "1", "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]},
     "index '1' out of 0..1"),
], ids=["extra", "duplicate", "string-score", "string-index"])
def test_a_rerank_answer_that_is_not_a_permutation_is_refused(tmp_path, body, why):
    """A rerank answer whose result indices are not exactly a permutation of the documents
    sent (extra, duplicate) or whose score is not a number is a BackendError naming why,
    and no reward of that request reaches the ledger."""
    with LocalOpenAIServer() as srv:
        srv.script(Reply(body=body))
        inner = get_scorer(f"rerank:m@{srv.url}")
        scorer = LedgerScorer(inner, Ledger(tmp_path / "ledger.sqlite"))
        docs = [Item("d1", "plants and light"), Item("d2", "the sea")]
        with pytest.raises(BackendError, match="malformed results") as err:
            scorer.score(Item("q", "how do plants grow"), docs)
        assert why in str(err.value)
    assert Ledger(tmp_path / "ledger.sqlite").count() == 0



def test_searching_a_folder_against_another_corpus_index_is_refused(folder, tmp_path):
    """Searching one BEIR folder's queries against the index of another corpus is refused
    (its judgments would score other documents: a silent nDCG of 0.0); with
    --allow-foreign-corpus it runs."""
    data, idx, _ = folder
    other = tmp_path / "other"
    _write_beir(other, {**CORPUS, "d9": {"title": "Extra", "text": "one more document"}},
                QUERIES, QRELS)
    runner = CliRunner()
    args = ["search", str(other), "--index", str(idx)]
    r = runner.invoke(app, args)
    assert r.exit_code == 1 and "is not the corpus index" in r.output, r.output
    assert "--allow-foreign-corpus" in r.output and len(r.output.strip().splitlines()) == 1
    r = runner.invoke(app, args + ["--allow-foreign-corpus"])
    assert r.exit_code == 0, r.output
    assert runner.invoke(app, ["search", str(data), "--index", str(idx)]).exit_code == 0


def _writing_commands(data, idx, tmp_path):
    """Every command that writes an output, with its output path (a file or a folder)."""
    qrels = f"qrels:{data / 'qrels' / 'test.tsv'}"
    return {
        "index": (["index", str(data), "--out", "{out}"], tmp_path / "o-idx"),
        "learn": (["learn", str(data), "--index", str(idx), "--scorer", qrels, "--budget", "2",
                   "--out", "{out}"], tmp_path / "o-learn.npz"),
        "search": (["search", str(data), "--index", str(idx), "--out", "{out}"],
                   tmp_path / "o-search.trec"),
        "rerank": (["rerank", str(data), "--index", str(idx), "--scorer", "bm25",
                    "--budget", "2", "--out", "{out}"], tmp_path / "o-rerank.trec"),
        "eval": (["eval", str(data), "--out", "{out}"], tmp_path / "o-eval"),
        "demo --export": (["demo", "--export", "{out}"], tmp_path / "o-demo"),
        "chain search": (["chain", "search", str(data), "--out", "{out}"],
                         tmp_path / "o-chain.trec"),
    }


@pytest.mark.parametrize("command", ["index", "learn", "search", "rerank", "eval",
                                     "demo --export", "chain search"])
def test_every_writing_command_refuses_an_existing_output(folder, tmp_path, command):
    """Every command that writes refuses an existing output without --overwrite, before
    doing any work, and leaves it untouched (one line, exit 1)."""
    data, idx, _ = folder
    args, out = _writing_commands(data, idx, tmp_path)[command]
    if out.suffix:
        out.write_text("precious\n")
    else:
        out.mkdir()
        (out / "keep.txt").write_text("precious\n")
    r = CliRunner().invoke(app, [a.replace("{out}", str(out)) for a in args])
    assert r.exit_code == 1, r.output
    assert "already exists" in r.output and "--overwrite" in r.output, r.output
    kept = out if out.suffix else out / "keep.txt"
    assert kept.read_text() == "precious\n"


@pytest.mark.parametrize("key", ["embedder_spec", "dim", "index_params"])
def test_an_index_manifest_missing_a_key_is_one_line_naming_it(folder, key):
    """An index manifest missing a key (edited, truncated, hand-made) is a one-line error
    naming the manifest file and the field, with the fix, from search and from serve's
    start-up (never a KeyError traceback)."""
    import tttembed.api as tt
    from tttembed.core.errors import DataError

    data, idx, _ = folder
    [manifest] = idx.glob("v-*/manifest.json")
    body = json.loads(manifest.read_text())
    body.pop(key)
    manifest.write_text(json.dumps(body))
    with pytest.raises(DataError, match=f"lacks field '{key}'"):
        tt.open_index(idx)
    r = CliRunner().invoke(app, ["search", str(data), "--index", str(idx)])
    assert r.exit_code == 1 and f"lacks field '{key}'" in r.output, r.output
    assert str(manifest) in r.output and "--overwrite" in r.output
    assert len(r.output.strip().splitlines()) == 1
    pytest.importorskip("starlette")
    from tttembed.serve import create_app

    with pytest.raises(DataError, match=f"lacks field '{key}'"):
        create_app(index=str(idx))


def test_eval_refuses_a_judgment_path_it_would_ignore_and_says_what_heldout_used(tmp_path,
                                                                                minilm):
    """eval gives a qrels scorer each task's own judgments: a qrels:PATH scorer (its path
    would be silently ignored) is refused naming the path and the spelling to use; the
    heldout protocol says in its notes what it learned from (--budget does not apply)."""
    from tests.evaluation.evaldata import write_tasks

    data = write_tasks(tmp_path / "data")
    base = ["eval", "alpha", "--data-root", str(data), "--protocol", "heldout",
            "--scope", "task", "--baselines", "direct", "--resamples", "20", "--no-plots",
            "--cache-dir", str(tmp_path / "c")]
    r = CliRunner().invoke(app, [*base, "--scorer", f"qrels:{tmp_path / 'mine.tsv'}"])
    assert r.exit_code == 1 and "would be ignored; give 'qrels'" in r.output, r.output
    assert str(tmp_path / "mine.tsv") in r.output and len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(app, [*base, "--scorer", "qrels", "--budget", "2",
                                 "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    notes = json.loads((tmp_path / "rep" / "results.json").read_text())["sections"]
    text = json.dumps(notes)
    assert "heldout: learns from every query of 80% of each task's judged queries" in text
    assert "--budget applies to the fixed protocol only" in text


def test_metrics_on_queries_whose_judgments_made_the_state_are_flagged(folder, tmp_path):
    """learn --scorer qrels:test.tsv, then search the same judged queries: the metrics
    line says LABEL LEAK and a note counts the queries (matched by text, not id); the same
    state on other judged queries (ids reused, other texts) is not flagged."""
    import tttembed.api as tt

    data, idx, state_file = folder
    r = CliRunner().invoke(app, ["search", str(data), "--index", str(idx),
                                 "--state", str(state_file)])
    assert r.exit_code == 0, r.output
    assert "LABEL LEAK on 2 of 2 judged queries" in r.output
    assert "2 of these judged queries have the text of a query whose judgments rewarded" \
        in r.output
    assert tt.load_state(state_file).rewarded  # recorded in the state file
    other = tmp_path / "other"  # the same ids, other questions: no leak
    _write_beir(other, CORPUS, {"q1": "what makes lava rise", "q2": "plants in the sun"},
                QRELS)
    result = tt.search(tt.open_index(idx), other, states=[state_file], task="data",
                       allow_foreign_corpus=True)
    assert result.leaked == {} and sum(result.applied.values()) == 2


@pytest.mark.parametrize("address", ["localhost", "ray://head", "http://head:6379", "h:99999"])
def test_a_malformed_ray_address_is_one_line(folder, tmp_path, address):
    """A malformed --ray-address is a one-line error giving the forms Ray takes (not a
    ValueError traceback from ray.init), before any pair is scored."""
    data, idx, _ = folder
    r = CliRunner().invoke(app, ["learn", str(data), "--index", str(idx), "--scorer", "bm25",
                                 "--budget", "2", "--executor", "ray", "--ray-address",
                                 address, "--out", str(tmp_path / "s.npz")])
    assert r.exit_code == 1, r.output
    assert "is not a Ray address" in r.output and "ray://HEAD:10001" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "s.npz").exists()


def test_an_unreachable_ray_cluster_is_one_line(monkeypatch):
    """When ray.init cannot reach the cluster (ValueError / ConnectionError from Ray), the
    error names the address and what to check, as a BackendError."""
    from tttembed.execute import ray_stage

    class FakeRay:
        def is_initialized(self) -> bool:
            return False

        def init(self, **kwargs):
            raise ConnectionError("Could not find any running Ray instance.\nmore")

    monkeypatch.setattr(ray_stage, "import_ray", lambda: FakeRay())
    monkeypatch.setattr(ray_stage, "probe_head", lambda address: None)  # the port answers
    with pytest.raises(BackendError, match=r"cannot reach the Ray cluster at --ray-address "
                                           r"127\.0\.0\.1:6379: ConnectionError: Could not find"):
        ray_stage.ensure_ray("127.0.0.1:6379")


def test_query_wise_states_match_by_text_not_by_id(folder, tmp_path, minilm):
    """A query-wise state learned on one query set reaches a query of another file only
    when the text matches: a file whose ids repeat (q1, q2) with other questions is
    refused as a state that reaches none; a file with other ids and the same text is
    adapted exactly as the learned query; serving (no query files) uses the same lookup."""
    import numpy as np

    import tttembed.api as tt
    from tttembed.ttt.snapshot import Snapshot

    data, idx, _ = folder
    runner = CliRunner()
    r = runner.invoke(app, ["learn", str(data), "--index", str(idx), "--scope", "query",
                            "--scorer", f"qrels:{data / 'qrels' / 'test.tsv'}", "--budget",
                            "3", "--out", str(tmp_path / "query.npz")])
    assert r.exit_code == 0, r.output
    state = tt.load_state(tmp_path / "query.npz")
    assert sorted(state.names) == ["data/q1", "data/q2"]  # ids kept for reports
    same_ids = tmp_path / "same_ids.jsonl"
    same_ids.write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in
                                {"q1": "lava from volcanoes", "q2": "leaves and light"}.items()))
    args = ["search", str(same_ids), "--index", str(idx), "--task", "data", "--state",
            str(tmp_path / "query.npz"), "--allow-foreign-corpus"]
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "a.trec")])
    assert r.exit_code == 1 and "applies to none of the 2 queries" in r.output, r.output
    assert "only when its text" in r.output and not (tmp_path / "a.trec").exists()

    index = tt.open_index(idx)
    other = {"x7": QUERIES["q2"], "x9": "an unrelated question about cats"}
    res = tt.search(index, other, task="data", states=[state], k=3)
    assert res.applied[state] == 1
    ref = tt.search(index, data, states=[state], k=3)
    assert res.to_run()["x7"] == ref.to_run()["q2"]

    x = minilm.encode(list(other.values()), "query")
    adapted, hits = Snapshot(1, (state,), (0.0,), {}).adapt(x, list(other.values()), "data")
    assert hits == {state.label: 1}
    assert np.abs(adapted[0] - x[0]).max() > 1e-4
    np.testing.assert_array_equal(adapted[1], x[1])


def _fill(mount) -> None:
    """Fill the tmpfs ``mount`` to its last byte (unbuffered writes, smaller and smaller)."""
    import os

    fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 16, 1 << 9, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                continue
    finally:
        os.close(fd)


@pytest.mark.parametrize("what", ["state", "run", "cache"])
def test_a_full_disk_names_the_file_and_says_what_filled(folder, tmpfs, what):
    """On a full disk the one-line error names the file being written (a state, a run, or
    the embedding cache, never the input corpus) and says the disk is full, not a
    permission problem."""
    data, idx, state_file = folder
    _fill(tmpfs)
    if what == "state":
        target = tmpfs / "s.npz"
        args = ["learn", str(data), "--index", str(idx), "--scorer",
                f"qrels:{data / 'qrels' / 'test.tsv'}", "--budget", "3", "--out", str(target)]
    elif what == "run":
        target = tmpfs / "run.trec"
        args = ["search", str(data), "--index", str(idx), "--out", str(target)]
    else:
        target = tmpfs / "cache"
        args = ["index", str(data), "--out", str(data.parent / "idx2"),
                "--cache-dir", str(target)]
    r = CliRunner().invoke(app, args)
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 1 and len(lines) == 1, r.output
    line = lines[0]
    assert str(target) in line and "No space left on device" in line, line
    assert "permission" not in line and str(data / "corpus.jsonl") not in line, line
    if what == "cache":
        assert "embedding cache" in line and "--cache-dir" in line, line
    assert not target.exists() or what == "cache"


@pytest.mark.parametrize("address", ["127.0.0.1:{port}", "ray://127.0.0.1:{port}"])
def test_a_ray_head_that_does_not_answer_fails_within_the_bound(address, monkeypatch):
    """``--ray-address HOST:PORT`` where nothing listens fails within the connect bound
    ($TTTEMBED_RAY_CONNECT_TIMEOUT) with one BackendError naming the address and the
    bound, before ray.init (which retries without bound) is ever called."""
    import socket

    from tttembed.execute import ray_stage

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    class NoInit:
        def is_initialized(self) -> bool:
            return False

        def init(self, **kwargs):
            raise AssertionError("ray.init must not be reached")

    connects: list[float | None] = []
    real = socket.create_connection

    def connect(where, timeout=None, *args, **kwargs):  # the probe's one bounded connect
        connects.append(timeout)
        return real(where, timeout, *args, **kwargs)

    monkeypatch.setattr(ray_stage, "import_ray", lambda: NoInit())
    monkeypatch.setattr(socket, "create_connection", connect)
    monkeypatch.setenv("TTTEMBED_RAY_CONNECT_TIMEOUT", "2")
    with pytest.raises(BackendError, match=r"cannot reach the Ray cluster .* within 2 s"):
        ray_stage.ensure_ray(address.format(port=port))
    assert connects == [2.0]  # bounded by the setting (no wall clock: issue 77)
