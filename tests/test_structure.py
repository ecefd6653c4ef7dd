"""The layout rules the code is held to (docs/architecture.md, STYLE.md), checked on the
source: no import cycle, the apps above the API, the public face, small functions."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tttembed"
#: The lazy face: its ``if TYPE_CHECKING:`` import of the API (``import *`` for type
#: checkers) is not counted; every other typing-only import is.
TYPING_ONLY_OK = {"tttembed"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in SRC.rglob("*.py")}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for b in node.body for n in ast.walk(b))
    return out


def _imports(name: str, path: Path, *, typing_only: bool = True) -> set[str]:
    """The ``tttembed`` modules ``name`` imports, module-level and function-level alike
    (``from pkg import sub`` counts as an import of ``pkg.sub`` when that is a module)."""
    return _imports_in(name, path.read_text(), path.name == "__init__.py", typing_only)


def _imports_in(name: str, text: str, is_package: bool, typing_only: bool = True) -> set[str]:
    tree = ast.parse(text)
    skip = set() if typing_only else _type_checking_nodes(tree)
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in MODULES and m != name}


def _graph() -> dict[str, set[str]]:
    return {m: _imports(m, p, typing_only=m not in TYPING_ONLY_OK) for m, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_among_src_modules():
    cycles = _cycles(_graph())
    assert not cycles, f"import cycles (module- or function-level imports): {cycles}"


def test_the_cycle_check_sees_function_level_and_typing_imports():
    """The check itself: a cycle closed by an import inside a function, or inside an
    ``if TYPE_CHECKING:`` block, is found."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    text = ("def f():\n    from tttembed.api import learn\n"
            "if TYPE_CHECKING:\n    import tttembed.index.base\n"
            "from . import metrics\n")
    assert _imports_in("tttembed.probe", text, False) == {
        "tttembed.api", "tttembed.index.base", "tttembed.metrics"}
    assert _imports_in("tttembed.probe", text, False, typing_only=False) == {
        "tttembed.api", "tttembed.metrics"}


def test_nothing_but_the_cli_imports_the_api():
    offenders = sorted(m for m, deps in _graph().items()
                       if "tttembed.api" in deps and not m.startswith("tttembed.cli")
                       and m != "tttembed")
    assert not offenders, f"library modules import tttembed.api (only cli/ may): {offenders}"


def test_the_api_imports_no_app():
    apps = ("tttembed.cli", "tttembed.serve", "tttembed.demo")
    deps = _imports("tttembed.api", MODULES["tttembed.api"])
    assert not {d for d in deps if d.startswith(apps)}, deps


def test_core_and_adapt_stand_on_their_own():
    """``core/`` imports only itself and the leaves (types, version); ``adapt/`` (the pure
    numerical core) only itself, ``core/`` and the leaves."""
    leaves = {"tttembed.types", "tttembed._version"}
    graph = _graph()
    for pkg, allowed in (("tttembed.core", ("tttembed.core",)),
                         ("tttembed.adapt", ("tttembed.adapt", "tttembed.core"))):
        for name, deps in graph.items():
            if name == pkg or name.startswith(pkg + "."):
                wrong = {d for d in deps - leaves if not d.startswith(allowed)}
                assert not wrong, (name, wrong)


def test_evaluation_never_imports_the_api():
    for name, path in MODULES.items():
        if name.startswith("tttembed.evaluation"):
            assert "tttembed.api" not in _imports(name, path), path


def test_exported_members():
    """``tttembed.api.__all__`` is exactly its public members, sorted, at most 32
    (httpx ``tests/test_exported_members.py``)."""
    import tttembed
    import tttembed.api as api

    members = {n for n, v in vars(api).items()
               if not n.startswith("_") and not inspect.ismodule(v)
               and n not in {"annotations"}}
    assert set(api.__all__) == members
    assert api.__all__ == sorted(api.__all__)
    assert len(api.__all__) <= 32, len(api.__all__)
    for name in api.__all__:
        assert getattr(tttembed, name) is getattr(api, name), name


def test_public_api_names_and_reexport():
    import tttembed
    import tttembed.api as api
    from tttembed.index.base import Index

    for name in ("load_embedder", "index_corpus", "open_index", "load_scorer", "learn",
                 "load_state", "search", "rerank", "evaluate", "chain_search", "chain_train",
                 "chain_eval", "mteb_model", "AdaptState", "SearchResult", "Ray",
                 "HttpLimits"):
        assert name in api.__all__, name
        assert getattr(tttembed, name) is getattr(api, name)
    assert callable(api.AdaptState.save)
    assert api.Index is Index  # the Protocol, not the FAISS class
    for internal in ("http_options", "parse_alpha", "ServeConfig", "create_app", "run_server",
                     "DemoResult", "embedder_for_index", "export_demo", "run_demo"):
        assert internal not in api.__all__, internal


def test_api_signatures_are_keyword_only_past_the_data():
    import tttembed.api as api

    for name in ("index_corpus", "learn", "search", "rerank", "evaluate", "load_scorer"):
        params = list(inspect.signature(getattr(api, name)).parameters.values())
        positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert len(positional) <= 2, (name, positional)


def test_one_version_string():
    import tttembed
    from tttembed._version import __version__

    assert tttembed.__version__ == __version__
    hits = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
            if re.search(r"__version__\s*=", p.read_text())]
    assert hits == ["_version.py"], hits
    pyproject = (SRC.parents[1] / "pyproject.toml").read_text()
    project = pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    assert 'dynamic = ["version"]' in project and not re.search(r"^version\s*=", project, re.M)


def test_vocabulary_defined_once():
    """The closed sets come from tttembed.types (typing.get_args), and aliases that
    types.py defines are not redefined elsewhere."""
    from typing import get_args

    from tttembed import types
    from tttembed.adapt.crossval import ALPHA_MODES
    from tttembed.adapt.objectives import OBJECTIVES
    from tttembed.adapt.scopes import SCOPES

    assert SCOPES is types.SCOPES and SCOPES == get_args(types.Scope)
    assert OBJECTIVES is types.OBJECTIVES and ALPHA_MODES is types.ALPHA_MODES
    redefined = []
    for path in SRC.rglob("*.py"):
        if path.name == "types.py" and path.parent == SRC:
            continue
        for line in path.read_text().splitlines():
            if re.match(r"(PathLike|SCOPE_METHODS|ALPHA_METHODS)\s*=", line) or (
                    re.match(r"StateLike\s*=", line) and path.name != "state.py"):
                redefined.append(f"{path.relative_to(SRC)}: {line.strip()}")
            if re.match(r"METRICS\s*=", line):
                redefined.append(f"{path.relative_to(SRC)}: {line.strip()}")
    assert not redefined, redefined


#: The only public names several modules may define, each a convention with one meaning
#: (name -> the reason). Nothing else is exempt: a new entry needs as good a reason.
#: The framework classes of tttembed.integrations.langchain and .llamaindex.
FRAMEWORK_CLASSES = ("TTTEmbedRetriever", "TTTEmbedChainRetriever", "TTTEmbedEmbeddings")
SHARED_NAMES = {
    # core/backends.py maps a spec scheme to "<backend module>:from_spec": every backend
    # module (embedder, scorer, index engine, loop store) builds itself from its spec there.
    "from_spec": "a backend module's factory, the backend table's entry point",
    # each vector-database engine module's (message, fix) for its engine's exceptions,
    # handed to index/collection.engine_errors on that module's store class: one role (the
    # ``Explain`` callable), one per engine; allowed only where it is used that way.
    "explain": "an index engine's error explainer, passed to engine_errors(explain)",
    # a framework's classes keep one name per role in each framework's module (as the
    # issue names them: `from tttembed.integrations.langchain import TTTEmbedRetriever`,
    # the same from `.llamaindex`); allowed only in a module that imports that framework.
    **{name: "a framework class, one per framework module" for name in FRAMEWORK_CLASSES},
}


def _shared(name: str, source: str) -> bool:
    """Whether ``name``, defined in a module with this source, is one of SHARED_NAMES."""
    return name == "from_spec" or (name == "explain" and "engine_errors(explain)" in source) \
        or (name in FRAMEWORK_CLASSES and ("from langchain_core." in source
                                           or "from llama_index.core" in source))


def _cli_commands(sources: dict[str, ast.Module]) -> set[tuple[str, str]]:
    """(module, function) of the typer command callbacks under cli/: decorated with
    ``@<app>.command(...)`` or registered as ``<app>.command(...)(function)``. A CLI
    command's function is named after its command (``search``, ``learn``), a convention
    the vocabulary check leaves alone."""
    cli = {rel: tree for rel, tree in sources.items() if rel.startswith("cli/")}

    def is_command(call: ast.expr) -> bool:
        return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "command")

    registered: set[str] = set()
    for tree in cli.values():
        aliases = {a.asname: a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   for a in node.names if a.asname}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and is_command(node.func) and node.args and \
                    isinstance(node.args[0], ast.Name):
                registered.add(aliases.get(node.args[0].id, node.args[0].id))
    return {(rel, node.name) for rel, tree in cli.items() for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (node.name in registered or any(is_command(d) for d in node.decorator_list))}


def _alias_name(node: ast.stmt) -> str | None:
    """The name a top-level statement gives a type alias (``Name = ...``, ``Name:
    TypeAlias = ...``, ``type Name = ...``): a CamelCase name, so not a CONSTANT."""
    target: ast.expr | None = None
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
    elif isinstance(node, ast.AnnAssign):
        target = node.target
    elif type(node).__name__ == "TypeAlias":  # ``type Name = ...`` (Python 3.12)
        target = getattr(node, "name", None)
    if isinstance(target, ast.Name) and re.fullmatch(r"[A-Z]\w*[a-z]\w*", target.id):
        return target.id
    return None


def _defined_name(node: ast.stmt) -> str | None:
    """The public name a top-level class, function or type alias defines."""
    if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        name: str | None = node.name
    else:
        name = _alias_name(node)
    return None if name is None or name.startswith("_") else name


def _duplicated_names(sources: dict[str, str]) -> dict[str, list[str]]:
    """Public top-level class, function and type-alias names defined in two or more
    modules ({relative path: source}), less the conventions above: {name: [modules]}."""
    trees = {rel: ast.parse(text) for rel, text in sources.items()}
    commands = _cli_commands(trees)
    defined: dict[str, list[str]] = {}
    for rel, tree in sorted(trees.items()):
        for node in tree.body:
            name = _defined_name(node)
            if name is None or (rel, name) in commands or _shared(name, sources[rel]):
                continue
            defined.setdefault(name, []).append(rel)
    return {name: where for name, where in sorted(defined.items()) if len(where) > 1}


def test_every_public_name_has_one_meaning():
    """STYLE.md, "one meaning per name": a public top-level class, function or type alias
    name is defined in one module of src/tttembed (every alias once, in types.py, or in
    the one module that uses it), except the conventions of ``SHARED_NAMES`` and the CLI's
    command callbacks."""
    # the check itself: it sees a repeat (an alias too, even beside a class of the same
    # name), and lets a typer command share an API name; CONSTANTS are not aliases
    probe = {"a.py": "def load(): ...\nclass Store: ...\ndef explain(e, s): ...\n"
                     "Run = dict[str, float]\nK = 10\nLIMIT = 5\nIndex = slice",
             "f.py": "Run: TypeAlias = dict[str, float]\nK = 10\nLIMIT = 5\nclass Index: ...\n"
                     "_Private = int",
             "g.py": "_Private = int",
             "b/c.py": "class Store: ...\ndef _load(): ...\ndef explain(e, s): ...\n"
                       "@engine_errors(explain)\nclass S: ...",
             "cli/x.py": "@app.command()\ndef load(): ...\ndef run(): ...",
             "cli/__init__.py": "from cli.x import run as go\napp.command('go')(go)",
             "d.py": "def run(): ...\ndef from_spec(s): ...",
             "e.py": "def explain(e, s): ..."}
    assert _duplicated_names(probe) == {"Index": ["a.py", "f.py"], "Run": ["a.py", "f.py"],
                                        "Store": ["a.py", "b/c.py"],
                                        "explain": ["a.py", "e.py"]}
    sources = {str(p.relative_to(SRC)): p.read_text() for p in SRC.rglob("*.py")}
    duplicated = _duplicated_names(sources)
    assert not duplicated, "\n".join(f"{name}: {', '.join(where)}"
                                     for name, where in duplicated.items())


def _private_imports(name: str, text: str) -> list[str]:
    """``module.name`` for every ``_private`` name (not a dunder) that module ``name``
    imports from another tttembed module."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tttembed") \
                and node.module != name:
            out += [f"{node.module}.{a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_module_imports_another_modules_private_name():
    """STYLE.md: no reaching into another module's ``_private`` names (make it public or
    move it)."""
    probe = "from tttembed.a import _x, y, __version__\nfrom tttembed.b import z as _z\n"
    assert _private_imports("tttembed.c", probe) == ["tttembed.a._x"]
    found = {m: _private_imports(m, p.read_text()) for m, p in MODULES.items()}
    assert not {m: names for m, names in found.items() if names}


def test_type_ignores_are_few_and_coded():
    ignores = []
    for path in SRC.rglob("*.py"):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if "# type: ignore" in line:
                ignores.append((f"{path.relative_to(SRC)}:{i}", line))
    uncoded = [where for where, line in ignores if not re.search(r"# type: ignore\[", line)]
    assert not uncoded, uncoded
    assert len(ignores) <= 20, [w for w, _ in ignores]


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


#: Lines a src module may hold (small modules: one job each); the registry's PostgreSQL
#: backend, split once, is held to 400.
MODULE_LINES, MODULE_LINES_HELD = 450, {"registry/postgres.py": 400}


def test_no_module_over_450_lines():
    big = [f"{p.relative_to(SRC)} ({n})" for p in sorted(SRC.rglob("*.py"))
           if (n := len(p.read_text().splitlines()))
           > MODULE_LINES_HELD.get(str(p.relative_to(SRC)), MODULE_LINES)]
    assert not big, big


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


def test_tests_mirror_the_source():
    """Every subpackage of src/tttembed has its folder under tests/, and no test module
    sits loose at the top of tests/ except the project-wide ones."""
    tests = SRC.parents[1] / "tests"
    packages = sorted(p.name for p in SRC.iterdir() if (p / "__init__.py").is_file())
    missing = [p for p in packages if not (tests / p).is_dir()]
    assert not missing, f"no tests/ folder for: {missing}"
    loose = sorted(p.name for p in tests.glob("test_*.py"))
    assert loose == ["test_benchmarks.py", "test_readme.py", "test_structure.py",
                     "test_tiers.py"], loose


def _imported(path: Path) -> set[str]:
    """The modules ``path`` imports (absolute names; a relative import resolved)."""
    tree = ast.parse(path.read_text())
    package = ".".join(("tttembed", *path.relative_to(SRC).parent.parts))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


def test_the_chain_learner_has_a_folder_of_its_own():
    """The loop's two learners: the chain learner lives in ``loop/chain/`` (no
    ``loop/chain_*.py`` beside the state learner's modules), each of its modules under 400
    lines; what both share (judge, spend, store, audit) stays in ``loop/`` and no module
    there imports the chain learner (no arrow back up; only the CLI starts it)."""
    loop = SRC / "loop"
    assert not sorted(p.name for p in loop.glob("chain_*.py"))
    own = sorted((loop / "chain").glob("*.py"))
    assert {p.stem for p in own} >= {"run", "learn", "promote", "rows"}
    big = [f"{p.name} ({n})" for p in own if (n := len(p.read_text().splitlines())) > 400]
    assert not big, big
    back = [str(p.relative_to(SRC)) for p in loop.rglob("*.py")
            if "chain" not in p.relative_to(loop).parts[:1]
            and any(m == "tttembed.loop.chain" or m.startswith("tttembed.loop.chain.")
                    for m in _imported(p))]
    assert not back, back
