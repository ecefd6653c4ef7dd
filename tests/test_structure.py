"""The layout rules the code is held to (ARCHITECTURE.md, STYLE.md), checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tttembed"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_cli_imports_nothing_below_the_api():
    allowed = {"tttembed", "tttembed.api"}
    bad = {}
    for path in (SRC / "cli").glob("*.py"):
        mods = {m for m in _imports(path) if m.startswith("tttembed")}
        wrong = {m for m in mods if m not in allowed and not m.startswith("tttembed.cli")}
        if wrong:
            bad[path.name] = sorted(wrong)
    assert not bad, f"cli modules import below tttembed.api: {bad}"


def test_evaluate_never_imports_the_api():
    for path in (SRC / "evaluation").glob("*.py"):
        assert "tttembed.api" not in _imports(path), path


def test_atomic_renames_live_in_core_io_only():
    users = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                   if "os.replace" in p.read_text() or "os.rename" in p.read_text())
    assert users == ["core/io.py"]


def test_no_function_over_60_lines():
    long = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({n})")
    assert not long, long


def test_no_bare_print_below_the_cli():
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.parent.name == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "print"):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not offenders, offenders


def test_public_api_names_and_reexport():
    import tttembed
    import tttembed.api as api

    for name in ("load_embedder", "index_corpus", "open_index", "load_scorer", "learn",
                 "load_state", "search", "rerank", "evaluate", "chain_search", "chain_train",
                 "chain_eval", "AdaptState", "SearchResult"):
        assert name in api.__all__, name
        assert getattr(tttembed, name) is getattr(api, name)
    assert callable(api.AdaptState.save)
