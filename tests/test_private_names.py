"""No factlab module reads another module's private names (issue 31.3).

An AST scan over ``src/factlab``. A private name has one leading underscore (``_memo``; not a
dunder, not ``_`` alone). It fails on

- ``from .x import _y`` (or ``from factlab.x import _y``): a private name imported from another
  factlab module;
- ``mod._y`` where ``mod`` is an imported factlab module, or ``Cls._y`` where ``Cls`` is a name
  imported from one;
- ``obj._y`` (and ``getattr(obj, "_y")``) on any object but ``self`` / ``cls`` / ``super()``,
  where ``_y`` is not defined in the module itself but in another factlab module: another
  module's object read by its private parts (``resources._memo``, ``resources._built``);
- ``self._y`` where ``_y`` is defined only in another factlab module: a private method or
  attribute inherited across modules (``self._log`` of ``rar._JudgeReward`` in ``klcf``);
- any private name that no factlab module defines (a third-party one, TRL's ``_metrics``),
  unless ``factlab.train.trl_seam.PRIVATE_NAMES`` allow-lists it for that module, where its
  reason and signature check live (``tests/test_trl_seam.py``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "factlab"


def is_private(name: str) -> bool:
    return name.startswith("_") and name != "_" and not (name.startswith("__") and name.endswith("__"))


def module_of(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def resolve(node: ast.ImportFrom, module: str, path: Path) -> str | None:
    """The absolute module an ``ImportFrom`` reads from, or None when it is not factlab's."""
    if node.level:
        base = _package_of(module, path).split(".")
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return target if target == "factlab" or target.startswith("factlab.") else None


@dataclass(frozen=True)
class Use:
    module: str
    line: int
    name: str
    how: str  # what was read, as written

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.how}"


def _defined_private(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, assigned names and attributes, and
    the names it binds by import (``import x as _y``)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[0] for a in node.names)
    return {n for n in out if is_private(n)}


def _modules() -> dict[str, tuple[Path, ast.AST]]:
    return {module_of(p): (p, ast.parse(p.read_text(), str(p))) for p in sorted(SRC.rglob("*.py"))}


def _is_module(name: str, modules) -> bool:
    return name in modules


class _Scan(ast.NodeVisitor):
    def __init__(self, module: str, path: Path, modules, defined: dict[str, set[str]]):
        self.module, self.path, self.modules, self.defined = module, path, modules, defined
        self.own = defined[module]
        self.local_classes = {n.name for n in ast.walk(modules[module][1]) if isinstance(n, ast.ClassDef)}
        self.imported_modules: set[str] = set()  # local names bound to factlab modules
        self.imported_names: set[str] = set()  # local names bound to objects of factlab modules
        self.uses: list[tuple[Use, str]] = []  # (use, kind)
        self.classes: list[bool] = []  # per enclosing class: whether a base is a factlab name

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(any(isinstance(b, ast.Name) and (b.id in self.imported_names or b.id in self.local_classes)
                                for b in node.bases))
        self.generic_visit(node)
        self.classes.pop()

    def add(self, node: ast.AST, name: str, how: str, kind: str) -> None:
        self.uses.append((Use(self.module, node.lineno, name, how), kind))

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name == "factlab" or a.name.startswith("factlab."):
                if any(is_private(p) for p in a.name.split(".")):
                    self.add(node, a.name, f"import {a.name}", "import")
                self.imported_modules.add(a.asname or a.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        source = resolve(node, self.module, self.path)
        if source is None:
            return
        for a in node.names:
            local = a.asname or a.name
            if is_private(a.name):
                self.add(node, a.name, f"from {source} import {a.name}", "import")
            if _is_module(f"{source}.{a.name}", self.modules):
                self.imported_modules.add(local)
            else:
                self.imported_names.add(local)

    def _owner(self, value: ast.AST) -> str:
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            return "self"
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
            return "self"
        if isinstance(value, ast.Name) and value.id in self.imported_modules:
            return "factlab module"
        if isinstance(value, ast.Name) and value.id in self.imported_names:
            return "factlab name"
        return "object"

    def _attribute(self, node: ast.AST, value: ast.AST, name: str, how: str) -> None:
        owner = self._owner(value)
        if owner in ("factlab module", "factlab name"):
            self.add(node, name, how, owner)
        elif name in self.own:
            return  # the module's own private name
        elif owner == "self" and not (self.classes and self.classes[-1]):
            self.add(node, name, how, "third-party")  # a class on third-party bases: theirs
        elif any(name in names for m, names in self.defined.items() if m != self.module):
            self.add(node, name, how, "another module's" if owner == "object" else "inherited")
        else:
            self.add(node, name, how, "third-party")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if is_private(node.attr):
            self._attribute(node, node.value, node.attr, f"{ast.unparse(node.value)}.{node.attr}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if (isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str) and is_private(node.args[1].value)):
            self._attribute(node, node.args[0], node.args[1].value, ast.unparse(node))
        self.generic_visit(node)


def scan(src: Path = SRC) -> list[tuple[Use, str]]:
    """Every read of a private name in ``src`` that is not the module's own: ``(use, kind)``
    with kind ``import``, ``factlab module``, ``factlab name``, ``another module's``,
    ``inherited`` or ``third-party``."""
    modules = {module_of(p, src): (p, ast.parse(p.read_text(), str(p))) for p in sorted(src.rglob("*.py"))}
    defined = {m: _defined_private(tree) for m, (_, tree) in modules.items()}
    out = []
    for m, (path, tree) in modules.items():
        s = _Scan(m, path, modules, defined)
        s.visit(tree)
        out += s.uses
    return out


def allowed(kinds: tuple[str, ...] = ("override", "attribute")) -> dict[str, set[str]]:
    """Third-party private name -> the factlab modules allowed to use it (the seam's allow-list)."""
    from factlab.train.trl_seam import PRIVATE_NAMES

    out: dict[str, set[str]] = defaultdict(set)
    for p in PRIVATE_NAMES:
        if p.kind in kinds:
            out[p.name].update(p.used_in)
    return out


def violations(src: Path = SRC) -> list[str]:
    ok = allowed()
    bad = []
    for use, kind in scan(src):
        if kind == "third-party" and use.module in ok.get(use.name, ()):
            continue
        why = {"third-party": f"third-party private name {use.name} not in trl_seam.PRIVATE_NAMES for {use.module}"}
        bad.append(f"{use}  ({why.get(kind, kind + ' private name')})")
    return bad


def test_no_module_reads_another_modules_private_names():
    bad = violations()
    assert not bad, "private names read across modules:\n  " + "\n  ".join(bad)


def test_every_allow_listed_name_is_still_used_where_it_says():
    """An allow-listed attribute nobody reads any more is dead weight: remove it (the overrides
    are checked against ``GRPOSeam`` in ``tests/test_trl_seam.py``)."""
    used = {(u.module, u.name) for u, kind in scan() if kind == "third-party"}
    stale = [(m, name) for name, mods in allowed(("attribute",)).items() for m in mods if (m, name) not in used]
    assert not stale, f"allow-listed in trl_seam.PRIVATE_NAMES but unused: {stale}"


# ---------------------------------------------------------------- the scan catches what it should


@pytest.mark.parametrize("code, expect", [
    ("from .a import _hidden\n", "from factlab.a import _hidden"),
    ("from factlab.a import _hidden\n", "from factlab.a import _hidden"),
    ("from . import a\nx = a._hidden\n", "a._hidden"),
    ("import factlab.a as a\nx = a._hidden\n", "a._hidden"),
    ("from .a import Thing\nx = Thing._hidden\n", "Thing._hidden"),
    ("def f(resources):\n    return resources._memo(1, 2)\n", "resources._memo"),
    ("def f(resources):\n    return resources._built\n", "resources._built"),
    ("def f(r):\n    return getattr(r, '_memo', None)\n", "getattr(r, '_memo', None)"),
    ("from .a import Thing\nclass B(Thing):\n    def g(self):\n        return self._hidden()\n", "self._hidden"),
    ("def f(trainer):\n    trainer._metrics['train']\n", "trainer._metrics"),
])
def test_the_scan_finds(tmp_path, code, expect):
    pkg = tmp_path / "factlab"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_hidden = 1\nclass Thing:\n    _memo = _built = None\n"
                              "    def _hidden(self):\n        pass\n")
    (pkg / "b.py").write_text(code)
    found = [u.how for u, _ in scan(pkg) if u.module == "factlab.b"]
    assert expect in found, found


def test_the_scan_leaves_a_modules_own_private_names_alone(tmp_path):
    pkg = tmp_path / "factlab"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "b.py").write_text("_x = 1\nclass C:\n    def __init__(self):\n        self._y = _x\n"
                              "    def copy(self, other):\n        other._y = self._y\n        return other._y\n"
                              "from .c import public as _alias\n")
    (pkg / "c.py").write_text("def public():\n    pass\n")
    assert scan(pkg) == []
