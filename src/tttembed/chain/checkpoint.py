"""Chain encoder checkpoints: their manifest, the encoder they load as, the optimizer's
moments, and the identity a checkpoint must match to resume (see :mod:`.train` for the
folder layout)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tttembed.chain.encoder import LoraQueryEncoder, load_base_model
from tttembed.chain.forms import TEXT, UNTRAINED_FORM, StateSettings, check_form
from tttembed.chain.setup import DEFAULT_MAX_SEQ_LENGTH, ChainTask
from tttembed.core.errors import ConfigError, StateMismatch
from tttembed.core.io import MANIFEST, json_hash, recover_directory
from tttembed.core.io import read_manifest as _read_manifest
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.types import PathLike

if TYPE_CHECKING:
    from tttembed.index.base import Index

FORMAT = "tttembed-chain-encoder"
#: The state token limit of a checkpoint that records none (the default it was trained at).
LEGACY_MAX_SEQ_LENGTH = 256
log = logging.getLogger("tttembed.chain")
_SAID: set[str] = set()  # the checkpoints whose missing limit was said
TRAIN_FIX = "train one with 'tttembed chain train DATA --out FOLDER'"


def read_checkpoint_manifest(path: PathLike) -> dict[str, Any]:
    """The manifest of the chain encoder checkpoint at ``path`` (a DataError otherwise)."""
    return _read_manifest(path, fmt=FORMAT, what="chain encoder checkpoint", fix=TRAIN_FIX)


def default_steps(path: PathLike | None) -> int:
    """The chain steps T an encoder runs when none are asked for, offline (``tttembed
    chain search``) and served (``serve --chain``) alike: the T a checkpoint was trained
    with, else (the untrained encoder, or a checkpoint that records none) ``DEFAULT_STEPS``."""
    from tttembed.chain.online import DEFAULT_STEPS

    if path is None:
        return DEFAULT_STEPS
    return int(read_checkpoint_manifest(path).get("steps") or DEFAULT_STEPS)


def trained_settings(path: PathLike | None) -> StateSettings:
    """The state settings ``path`` was trained with (its manifest's config), read as the
    defaults of every reader (``chain search | eval``, ``serve --chain``, the learner).
    The untrained encoder (None): ``DEFAULT_MAX_SEQ_LENGTH`` and ``UNTRAINED_FORM`` (the
    entity state, measured best with it). A checkpoint that records no limit was trained at
    256, the default before limits were recorded: it keeps 256, said once in the log; one
    that records no form was trained on text states."""
    if path is None:
        return StateSettings(DEFAULT_MAX_SEQ_LENGTH, UNTRAINED_FORM)
    config = read_checkpoint_manifest(path).get("config") or {}
    limit = config.get("max_seq_length")
    if limit is None:
        if str(path) not in _SAID:
            _SAID.add(str(path))
            log.warning("chain checkpoint %s records no state token limit (trained before "
                        "limits were recorded): it reads %d-token states, as it was "
                        "trained; give --max-seq-length to choose another", path,
                        LEGACY_MAX_SEQ_LENGTH)
        limit = LEGACY_MAX_SEQ_LENGTH
    return StateSettings(int(limit), str(config.get("state") or TEXT))


def state_settings(path: PathLike | None, max_seq_length: int | None = None,
                   form: str | None = None) -> StateSettings:
    """The settings a reader uses: those asked for, else those ``path`` records."""
    own = trained_settings(path)
    return StateSettings(own.max_seq_length if max_seq_length is None else int(max_seq_length),
                         own.form if form is None else check_form(form))


def load_encoder(path: PathLike | None, *, base: str = DEFAULT_EMBEDDER,
                 max_seq_length: int | None = None, trainable: bool = False,
                 index: Index | None = None, transfer: bool = False) -> LoraQueryEncoder:
    """A query encoder: the checkpoint's adapter on a fresh base model, or (path None) a
    fresh adapter, which encodes exactly like the frozen model. With ``index`` the
    checkpoint must have been trained against the same passage index (embedder and
    corpus; ``transfer``: the same embedder, any corpus, as a transfer evaluation asks).
    ``max_seq_length`` None: the limit the checkpoint was trained with."""
    if max_seq_length is None:  # a caller that resolved it already reads no manifest again
        max_seq_length = trained_settings(path).max_seq_length
    if path is None:
        return LoraQueryEncoder(load_base_model(base, max_seq_length=max_seq_length))
    manifest = read_checkpoint_manifest(path)
    if index is not None:
        check_index(manifest, path, index, corpus=not transfer)
    model = load_base_model(manifest["config"]["base"], max_seq_length=max_seq_length)
    return LoraQueryEncoder(model, adapter=Path(path) / "adapter", trainable=trainable)


def check_index(manifest: dict[str, Any], path: PathLike, index: Index,
                fix: str = "give the index it was trained on (--index), or train one on "
                           "this index's corpus: 'tttembed chain train DATA --index INDEX'",
                corpus: bool = True) -> None:
    """Refuse (StateMismatch, the reason and ``fix``) a checkpoint trained against another
    passage index than ``index``: another embedder, or (``corpus``) another corpus (its
    fingerprint; a checkpoint that records none is compared on the embedder alone)."""
    if manifest.get("index_embedder") != index.identity:
        raise StateMismatch(f"checkpoint {path} was trained for passages of "
                            f"{manifest.get('index_embedder')!r}, the index {index.path} "
                            f"holds {index.identity!r}; {fix}")
    mine = index.manifest.get("corpus_fingerprint")
    theirs = manifest.get("corpus_fingerprint")
    if corpus and mine and theirs and mine != theirs:
        raise StateMismatch(f"checkpoint {path} was trained against another corpus "
                            f"(fingerprint {str(theirs)[:12]}...) than the index {index.path} "
                            f"holds ({str(mine)[:12]}...); {fix}")


def save_optimizer(opt: Any, params: list[Any], path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {}
    for i, p in enumerate(params):
        for key, value in opt.state.get(p, {}).items():
            tensors[f"{i}.{key}"] = value.detach().cpu().reshape(-1).clone() \
                if key == "step" else value.detach().cpu().contiguous()
    save_file(tensors, str(path))


def load_optimizer(opt: Any, params: list[Any], path: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    for i, p in enumerate(params):
        state = {}
        for key in ("step", "exp_avg", "exp_avg_sq"):
            if f"{i}.{key}" in tensors:
                t = tensors[f"{i}.{key}"]
                state[key] = t.reshape(()) if key == "step" else t.to(p.device)
        if state:
            opt.state[p] = state


def questions_digest(task: ChainTask) -> str:
    """A digest of the questions and their gold rows: what a checkpoint was trained on."""
    return json_hash([task.questions, task.golds])


def checkpoint_identity(task: ChainTask, index: Index, config: dict[str, Any]) -> dict[str, Any]:
    """What must be equal for a checkpoint to resume."""
    return {"config": config, "n_questions": len(task.golds),
            "questions_digest": questions_digest(task), "index_embedder": index.identity,
            "corpus_fingerprint": index.manifest.get("corpus_fingerprint")}


def resume_point(out: Path, expected: dict[str, Any],
                 overwrite: bool) -> tuple[int, list[dict[str, Any]]]:
    """(epochs done, history) of the checkpoint at ``out`` when it matches ``expected``
    (:func:`checkpoint_identity`; keys an older checkpoint lacks are not compared); a fresh
    start for a missing or empty folder (or with ``overwrite``). Repairs a swap a kill cut
    short."""
    recover_directory(out)
    if overwrite or not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return 0, []
    if not (out / MANIFEST).is_file():
        raise ConfigError(f"{out} exists and is not a chain encoder checkpoint; pass "
                          "--overwrite (overwrite=True) to replace it, or another --out folder")
    manifest = read_checkpoint_manifest(out)
    differ = [k for k, v in expected.items()
              if k in manifest and manifest[k] != v or k not in manifest and k == "config"]
    if differ:
        raise ConfigError(f"{out} holds a checkpoint trained with another "
                          f"{', '.join(_LABELS[k] for k in differ)} (checkpoint: "
                          f"{_short(manifest.get(differ[0]))}, this run: "
                          f"{_short(expected[differ[0]])}); pass --overwrite "
                          "(overwrite=True) to restart, or another --out folder")
    return int(manifest["epochs_done"]), list(manifest["history"])


_LABELS = {"config": "configuration", "n_questions": "number of questions",
           "questions_digest": "questions", "index_embedder": "index embedder",
           "corpus_fingerprint": "corpus (fingerprint)"}


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json_hash(value, 12)
    return text if len(text) <= 40 else text[:37] + "..."
