"""``qwen3-reranker:NAME_OR_PATH``: Qwen3-Reranker causal LMs scored on their native template.

The text is ``PREFIX + "<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>: {doc}" +
SUFFIX`` (the published model card's template) and the reward is
``exp(l_yes) / (exp(l_yes) + exp(l_no))`` from the raw logits of the ``yes`` and ``no``
tokens at the last position (mapping ``"p_yes"``); no sampling.

Tokenisation follows the model card: PREFIX and SUFFIX are tokenised on their own, the
middle part (instruction, query, document) as one string. When the whole does not fit
``max_length`` tokens (default 8192, capped by the model's ``max_position_embeddings``),
only the document's tokens are cut, from its end; PREFIX, the instruction, the query and
SUFFIX are kept. As a last resort, when even an empty document does not fit, the query's
tokens are cut from its end (a warning is logged); an instruction that alone does not fit
is a ConfigError.

Batches are left-padded so that the last position is every row's real last token, with
position ids counted from each row's first real token, so a pair gets the same reward
alone or in a batch. Weights load from a local folder or the local Hugging Face cache
only (``local_files_only=True``): tttembed never downloads a model.

Options: ``instruction``, ``batch_size`` (8), ``max_length`` (8192), ``device`` (cuda when
available, else cpu), ``dtype`` (``"auto"``: bfloat16 on cuda, float32 on cpu; or
``"float32"``, ``"bfloat16"``, ``"float16"``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from tttembed.core.backends import identity
from tttembed.core.devices import pick_device
from tttembed.core.errors import BackendError, ConfigError, MissingDependency
from tttembed.score.base import Item

log = logging.getLogger(__name__)

PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    'and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\n"
)
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT_INSTRUCTION = (
    "Given a web search query, retrieve relevant passages that answer the query"
)
DEFAULT_MAX_LENGTH = 8192
_DTYPES = ("auto", "float32", "bfloat16", "float16")


def format_pair(instruction: str, query: str, doc: str) -> str:
    """The middle of the native template (between PREFIX and SUFFIX)."""
    return f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}"


def format_full(instruction: str, query: str, doc: str) -> str:
    """The whole native prompt text for one pair (untruncated)."""
    return PREFIX + format_pair(instruction, query, doc) + SUFFIX


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _body_ids(tokenizer: Any, instruction: str, query: str, doc: str
              ) -> tuple[list[int], int, int, int]:
    """Token ids of format_pair(...) and the token spans (q_start, q_end, doc_start)."""
    head = f"<Instruct>: {instruction}\n<Query>: "
    mid = "\n<Document>: "
    if getattr(tokenizer, "is_fast", False):
        text = format_pair(instruction, query, doc)
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        ends = [int(e) for _, e in enc["offset_mapping"]]
        q_char, qe_char = len(head), len(head) + len(query)
        d_char = qe_char + len(mid)

        def first_past(char: int) -> int:
            # first token holding any character at or after ``char``
            return next((i for i, e in enumerate(ends) if e > char), len(ids))

        d_tok = first_past(d_char)
        q_tok = min(first_past(q_char), d_tok)
        qe_tok = max(q_tok, min(first_past(qe_char), d_tok))
        return ids, q_tok, qe_tok, d_tok
    # slow tokenizers: encode the pieces separately
    h, q, m, d = (_encode(tokenizer, s) for s in (head, query, mid, doc))
    return h + q + m + d, len(h), len(h) + len(q), len(h) + len(q) + len(m)


def build_inputs(tokenizer: Any, instruction: str, query: str, docs: Sequence[str],
                 max_length: int, *, prefix_ids: Sequence[int] | None = None,
                 suffix_ids: Sequence[int] | None = None) -> list[list[int]]:
    """Unpadded token ids ``PREFIX + body + SUFFIX`` per document, each <= max_length.

    Only document tokens are cut (from the end); then, as a last resort, query tokens.
    """
    pre = list(prefix_ids) if prefix_ids is not None else _encode(tokenizer, PREFIX)
    suf = list(suffix_ids) if suffix_ids is not None else _encode(tokenizer, SUFFIX)
    room = int(max_length) - len(pre) - len(suf)
    out: list[list[int]] = []
    for doc in docs:
        ids, q_tok, qe_tok, d_tok = _body_ids(tokenizer, instruction, query, doc)
        over = len(ids) - room
        if over > 0:
            n_doc = len(ids) - d_tok
            if over <= n_doc:
                ids = ids[: len(ids) - over]
            else:
                cut_q = over - n_doc
                if cut_q > qe_tok - q_tok:
                    raise ConfigError(
                        f"the reranker template and instruction alone exceed max_length="
                        f"{max_length} tokens; raise max_length or shorten the instruction")
                log.warning("query of %d tokens cut by %d to fit max_length=%d "
                            "(document dropped entirely)", qe_tok - q_tok, cut_q, max_length)
                ids = ids[: qe_tok - cut_q] + ids[qe_tok:d_tok]
        out.append(pre + ids + suf)
    return out


def pad_left(batch: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-pad to the longest row: (input_ids, attention_mask) int64 arrays."""
    width = max(len(r) for r in batch)
    ids = np.full((len(batch), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(batch), width), dtype=np.int64)
    for i, row in enumerate(batch):
        if row:
            ids[i, width - len(row):] = row
            mask[i, width - len(row):] = 1
    return ids, mask


def _dtype_kwarg() -> str:
    """``dtype`` in transformers >= 4.56, ``torch_dtype`` before."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def _token_id(tokenizer: Any, token: str) -> int:
    tid = tokenizer.convert_tokens_to_ids(token)
    if tid is None or tid == getattr(tokenizer, "unk_token_id", None) or isinstance(tid, list):
        raise ConfigError(f"the tokenizer has no single {token!r} token; "
                          "qwen3-reranker: needs a Qwen3-Reranker model")
    return int(tid)


class Qwen3Reranker:
    """Scorer: P(yes) of a Qwen3-Reranker on its native template."""

    mapping = "p_yes"

    def __init__(self, rest: str, *, instruction: str = DEFAULT_INSTRUCTION,
                 batch_size: int = 8, max_length: int = DEFAULT_MAX_LENGTH,
                 device: str | None = None, dtype: str = "auto") -> None:
        if not rest:
            raise ConfigError("qwen3-reranker: spec needs a model folder or cached hub name, "
                              "e.g. 'qwen3-reranker:Qwen/Qwen3-Reranker-0.6B'")
        if dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        if int(batch_size) < 1 or int(max_length) < 1:
            raise ConfigError("batch_size and max_length must be positive integers")
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise MissingDependency("transformers", "rerank") from exc
        self.spec = f"qwen3-reranker:{rest}"
        self.instruction = instruction
        self.batch_size = int(batch_size)
        self.device = pick_device(device)
        if dtype == "auto":
            dtype = "bfloat16" if self.device.startswith("cuda") else "float32"
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                rest, local_files_only=True, padding_side="left")
            self.model = AutoModelForCausalLM.from_pretrained(
                rest, local_files_only=True, **{_dtype_kwarg(): getattr(torch, dtype)})
        except (OSError, ValueError) as exc:
            raise BackendError(
                f"cannot load reranker {rest!r}: {str(exc).splitlines()[0] if str(exc) else exc}"
                " (give a local folder, or a hub name already in the local cache)") from exc
        self.model.to(self.device).eval()  # type: ignore[arg-type]
        limit = getattr(self.model.config, "max_position_embeddings", None)
        self.max_length = min(int(max_length), int(limit)) if limit else int(max_length)
        self.yes_id = _token_id(self.tokenizer, "yes")
        self.no_id = _token_id(self.tokenizer, "no")
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        self.pad_id = int(pad) if pad is not None else 0
        self.prefix_ids = _encode(self.tokenizer, PREFIX)
        self.suffix_ids = _encode(self.tokenizer, SUFFIX)
        # max_length: the option; a model's own cap is in its spec
        self.identity = identity(
            self.spec,
            instruction=repr(instruction) if instruction != DEFAULT_INSTRUCTION else None,
            max_length=self.max_length if int(max_length) != DEFAULT_MAX_LENGTH else None)

    def build_inputs(self, query: str, docs: Sequence[str]) -> list[list[int]]:
        return build_inputs(self.tokenizer, self.instruction, query, docs, self.max_length,
                            prefix_ids=self.prefix_ids, suffix_ids=self.suffix_ids)

    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        rows = self.build_inputs(query.text, [d.text for d in docs])
        out = np.full(len(rows), np.nan, dtype=np.float64)
        # longest first, so that each batch holds rows of similar length
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        for start in range(0, len(order), self.batch_size):
            idx = order[start: start + self.batch_size]
            out[idx] = self._p_yes([rows[i] for i in idx])
        return out

    def _p_yes(self, batch: list[list[int]]) -> np.ndarray:
        import torch

        from tttembed.core.devices import use_threads

        use_threads()
        ids, mask = pad_left(batch, self.pad_id)
        input_ids = torch.from_numpy(ids).to(self.device)
        attention = torch.from_numpy(mask).to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            logits = self.model(input_ids=input_ids, attention_mask=attention,
                                position_ids=positions, logits_to_keep=1).logits[:, -1, :]
            pair = logits[:, [self.yes_id, self.no_id]].double()
            p = torch.softmax(pair, dim=-1)[:, 0].cpu().numpy()
        finite = torch.isfinite(pair).all(dim=-1).cpu().numpy()
        return np.where(finite, p, np.nan)


def from_spec(rest: str, **options: Any) -> Qwen3Reranker:
    return Qwen3Reranker(rest, **options)
