"""The library's layers (docs/design.md "Shape"): imports only point down, no circles, and
factlab's own modules are imported at module top, never hidden inside functions."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "factlab"

# bottom to top; a module may import its own layer (without a circle) or any layer below
LAYERS = [
    ("text", "prompts", "parsing", "labels", "paths", "stage_cache", "integrity", "registry", "plots", "threads",
     "forked", "credentials"),
    ("config",),
    ("sections",),
    ("decoding", "models", "data", "organism"),
    ("judges", "corpus", "serve"),
    ("rewards",),
    ("synth", "eval"),
    ("experiment",),
    ("train",),
    ("recipes",),
    ("report", "manifest", "runner", "runall", "sweep", "launch", "evidence", "plan", "cli"),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def _module_name(path: Path, src: Path = SRC) -> str:
    rel = path.relative_to(src.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, src: Path = SRC) -> list[tuple[str, bool]]:
    """(imported factlab name, at module top?) for every import of factlab in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path, src)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = set(map(id, tree.body))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out += [(f"{mod}.{a.name}", id(node) in top) for a in node.names if mod.startswith("factlab")]
        elif isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names if a.name.startswith("factlab")]
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}


def _resolve(name: str) -> str:
    """``factlab.rewards.seva.process_reward`` -> the module ``factlab.rewards.seva``."""
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_and_sit_at_module_top(module):
    src = _layer(module)
    if src == "__init__":
        return
    assert src in RANK, f"{module}: add its layer to LAYERS in this test (and to docs/design.md's picture)"
    for target, at_top in _imports(MODULES[module]):
        target = _resolve(target)
        assert at_top, f"{module} imports {target} inside a function: factlab's own imports sit at module top"
        dst = _layer(target)
        assert RANK[dst] <= RANK[src], f"{module} (layer {RANK[src]}) imports {target} (layer {RANK[dst]}): upward"


def test_no_import_circles():
    graph = {m: {_resolve(t) for t, _ in _imports(p)} - {m} for m, p in MODULES.items()}
    # a package's __init__ re-exports its children; the child -> parent package edge is not a circle
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for n in graph.get(m, ()):
            if n == m.rpartition(".")[0] or n not in graph:
                continue
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_the_checker_sees_a_hidden_and_an_upward_import(tmp_path):
    bad = tmp_path / "factlab" / "text.py"
    bad.parent.mkdir()
    bad.write_text("from .train import run\n\ndef f():\n    from . import config\n")
    found = _imports(bad, tmp_path / "factlab")
    assert ("factlab.train.run", True) in found and ("factlab.config", False) in found


def test_no_module_level_definition_shadows_a_name_the_module_imports():
    """``recipes.compare`` once defined an ``evaluate`` stage over the ``eval.suites.evaluate`` it
    imported: every call of the suite then called the stage (a TypeError found only by the notebook
    test). A top-level ``def``, ``class`` or assignment never reuses an imported name."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {(a.asname or a.name).split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names}
        defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        defined += [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
        found += [f"{path.relative_to(SRC)}: {name}" for name in defined if name in imported and name != "__all__"]
    assert found == [], found
