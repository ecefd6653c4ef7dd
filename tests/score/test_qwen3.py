"""Qwen3-Reranker scorer against a tiny random-weight Qwen3 causal LM built in the test."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from tttembed.core.errors import BackendError, ConfigError
from tttembed.score.base import Item, Scorer, get_scorer
from tttembed.score.qwen3 import (
    DEFAULT_INSTRUCTION,
    PREFIX,
    SUFFIX,
    Qwen3Reranker,
    build_inputs,
    format_full,
    format_pair,
    pad_left,
)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
SENTENCES = [
    "yes no yes no",
    "yes\nno\n",
    ("Judge whether the Document meets the requirements based on the Query and the Instruct "
     'provided. Note that the answer can only be "yes" or "no".'),
    "Given a web search query, retrieve relevant passages that answer the query",
    "<Instruct>: <Query>: <Document>: system user assistant",
    "what causes the tides? The moon's gravity pulls the oceans of the earth.",
    "Photosynthesis turns light into chemical energy in plants.",
]
QUERY = Item("q1", "what causes the tides?")
DOCS = [
    Item("d1", "The moon's gravity pulls the oceans."),
    Item("d2", "Plants turn light into energy."),
    Item("d3", "yes"),
    Item("d4", "Tides follow the moon and the sun; the earth turns under the bulges of water "
               "that gravity raises on the near and far sides."),
    Item("d5", ""),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    path = tmp_path_factory.mktemp("tiny-qwen3-reranker")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES * 5, trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>",
                                      eos_token="<|im_end|>")
    wrapped.save_pretrained(path)
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tok.get_vocab()), hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                         head_dim=8, max_position_embeddings=512, initializer_range=0.1,
                         tie_word_embeddings=False)
    Qwen3ForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def reranker(model_dir):
    return Qwen3Reranker(str(model_dir), batch_size=3, device="cpu")


def test_prompt_is_the_model_cards_template():
    expected = (
        "<|im_start|>system\nJudge whether the Document meets the requirements based on the "
        'Query and the Instruct provided. Note that the answer can only be "yes" or "no".'
        "<|im_end|>\n<|im_start|>user\n"
        "<Instruct>: Find it\n<Query>: q?\n<Document>: d."
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert format_full("Find it", "q?", "d.") == expected
    assert format_pair("I", "Q", "D") == "<Instruct>: I\n<Query>: Q\n<Document>: D"
    assert PREFIX + format_pair("Find it", "q?", "d.") + SUFFIX == expected
    assert DEFAULT_INSTRUCTION == (
        "Given a web search query, retrieve relevant passages that answer the query")


def test_yes_and_no_are_single_tokens(reranker):
    tok = reranker.tokenizer
    assert tok.convert_ids_to_tokens(reranker.yes_id) == "yes"
    assert tok.convert_ids_to_tokens(reranker.no_id) == "no"
    assert reranker.yes_id != reranker.no_id


def test_inputs_match_separate_encoding_when_nothing_is_cut(reranker):
    tok = reranker.tokenizer

    def enc(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    rows = reranker.build_inputs(QUERY.text, [d.text for d in DOCS])
    for row, doc in zip(rows, DOCS):
        assert row == (enc(PREFIX) + enc(format_pair(DEFAULT_INSTRUCTION, QUERY.text, doc.text))
                       + enc(SUFFIX))


def test_reward_is_softmax_of_yes_no_logits(reranker):
    tok, model = reranker.tokenizer, reranker.model
    rewards = reranker.score(QUERY, DOCS)
    assert rewards.dtype == np.float64 and rewards.shape == (len(DOCS),)
    assert np.all((rewards >= 0) & (rewards <= 1))
    assert np.ptp(rewards) > 1e-3  # the random model does tell the pairs apart
    for doc, got in zip(DOCS, rewards):
        ids = tok(format_full(DEFAULT_INSTRUCTION, QUERY.text, doc.text),
                  add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
        l_yes = logits[tok.convert_tokens_to_ids("yes")].item()
        l_no = logits[tok.convert_tokens_to_ids("no")].item()
        by_hand = math.exp(l_yes) / (math.exp(l_yes) + math.exp(l_no))
        assert got == pytest.approx(by_hand, abs=1e-6)


def test_deterministic(reranker):
    a = reranker.score(QUERY, DOCS)
    b = reranker.score(QUERY, DOCS)
    assert np.array_equal(a, b)


def test_batching_with_left_padding_matches_one_at_a_time(model_dir, reranker):
    batched = reranker.score(QUERY, DOCS)
    single = np.array([reranker.score(QUERY, [d])[0] for d in DOCS])
    np.testing.assert_allclose(batched, single, atol=1e-5, rtol=0)
    wide = Qwen3Reranker(str(model_dir), batch_size=len(DOCS), device="cpu")
    np.testing.assert_allclose(wide.score(QUERY, DOCS), single, atol=1e-5, rtol=0)
    assert reranker.score(QUERY, []).shape == (0,)


def test_pad_left_puts_real_tokens_last():
    ids, mask = pad_left([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_truncation_cuts_only_the_document(reranker):
    tok = reranker.tokenizer
    pre = tok(PREFIX, add_special_tokens=False)["input_ids"]
    suf = tok(SUFFIX, add_special_tokens=False)["input_ids"]
    head = tok(format_pair(DEFAULT_INSTRUCTION, QUERY.text, ""),
               add_special_tokens=False)["input_ids"]
    long_doc = "The moon pulls the oceans of the earth. " * 200
    max_length = len(pre) + len(head) + len(suf) + 20
    short, cut = build_inputs(tok, DEFAULT_INSTRUCTION, QUERY.text, ["yes", long_doc],
                              max_length)
    assert len(cut) == max_length
    assert cut[: len(pre)] == pre and cut[-len(suf):] == suf
    body = cut[len(pre): -len(suf)]
    full_body = tok(format_pair(DEFAULT_INSTRUCTION, QUERY.text, long_doc),
                    add_special_tokens=False)["input_ids"]
    assert body == full_body[: len(body)]  # a prefix of the untruncated body: the end was cut
    assert tok.decode(body).startswith(format_pair(DEFAULT_INSTRUCTION, QUERY.text, "The moon"))
    assert short == pre + tok(format_pair(DEFAULT_INSTRUCTION, QUERY.text, "yes"),
                              add_special_tokens=False)["input_ids"] + suf


def test_scorer_max_length_is_capped_and_respected(model_dir):
    capped = Qwen3Reranker(str(model_dir), device="cpu")
    assert capped.max_length == 512  # the tiny model's max_position_embeddings
    small = Qwen3Reranker(str(model_dir), device="cpu", max_length=120)
    rows = small.build_inputs(QUERY.text, ["gravity " * 500])
    assert len(rows[0]) <= 120 and rows[0][-len(small.suffix_ids):] == small.suffix_ids
    r = small.score(QUERY, [Item("long", "gravity " * 500)])
    assert 0.0 <= r[0] <= 1.0
    assert "max_length=120" in small.identity and capped.identity == capped.spec


def test_query_is_cut_only_as_a_last_resort(reranker):
    tok = reranker.tokenizer
    pre = tok(PREFIX, add_special_tokens=False)["input_ids"]
    suf = tok(SUFFIX, add_special_tokens=False)["input_ids"]
    max_length = len(pre) + len(suf) + 60
    (row,) = build_inputs(tok, "Find it", "tides " * 100, ["a document"], max_length)
    assert len(row) == max_length and row[-len(suf):] == suf and row[: len(pre)] == pre
    text = tok.decode(row[len(pre): -len(suf)])
    assert text.startswith("<Instruct>: Find it\n<Query>: tides")
    # the document is dropped whole (the space before it went with its first token)
    assert text.endswith("\n<Document>:") and "a document" not in text
    with pytest.raises(ConfigError, match="max_length"):
        build_inputs(tok, "Find it " * 50, "q", ["d"], len(pre) + len(suf) + 10)


def test_registry_builds_it(model_dir):
    scorer = get_scorer(f"qwen3-reranker:{model_dir}", device="cpu")
    assert isinstance(scorer, Scorer)
    assert scorer.spec == f"qwen3-reranker:{model_dir}" and scorer.mapping == "p_yes"
    r = scorer.score(QUERY, DOCS[:2])
    assert r.shape == (2,) and np.all((r >= 0) & (r <= 1))


def test_errors(tmp_path):
    with pytest.raises(BackendError, match="local"):
        Qwen3Reranker(str(tmp_path / "no-such-model"), device="cpu")
    with pytest.raises(ConfigError):
        Qwen3Reranker("", device="cpu")
    with pytest.raises(ConfigError, match="dtype"):
        Qwen3Reranker("x", dtype="int8")
