"""The import graph of icl_core, analysis and sweeps: no circles, and only the allowed directions.

Every .py file is parsed (never imported); every import statement counts wherever it is (module
level, inside functions, under TYPE_CHECKING), relative imports resolved, `from pkg import name`
counted as an import of the submodule pkg.name where one exists, and importing a.b.c counts as
importing its packages a.b and a too (Python runs their __init__ first). A package's __init__
importing its own children is not a circle. Layers (docs/developing.md "Layout"):

    sweeps -> orchestration -> core;   analysis -> core;   models and tasks never import each
    other; core imports neither Ray nor analysis nor the orchestration; analysis never imports
    the orchestration (what it needs of a study comes from the manifest beside the rows).

No known exceptions: ALLOWED is empty, and any entry must say why it is there.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("icl_core", "analysis", "sweeps")

# the orchestration layer: sweep spec, planning, Ray Tune launch and trainable, searches,
# catalog, command lines
ORCHESTRATION = ("icl_core.catalog", "icl_core.cli", "icl_core.sweep", "icl_core.study",
                 "icl_core.search", "icl_core.orchestrate", "icl_core.resources",
                 "icl_core.launch", "icl_core.trial", "icl_core.trainable",
                 "icl_core.regenerate", "icl_core.preflight", "icl_core.console",
                 "icl_core.tracking", "icl_core.trackers", "icl_core.hparams",
                 "icl_core.searcher", "icl_core.adaptive",
                 "icl_core.pool", "icl_core.report", "icl_core.plan_report",
                 "icl_core.levels", "icl_core.api", "icl_core.outcome")
# the science core: everything else in icl_core (models, tasks, baselines, closed forms, the
# trainer, evaluator, row store and what they stand on)
RAY = ("ray",)

# (importer, imported) edges knowingly allowed despite the rules, each with its reason: none.
ALLOWED: dict[tuple[str, str], str] = {}


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def imports(root: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(project edges, external top-level names) per module."""
    mods = modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    external: dict[str, set[str]] = {m: set() for m in mods}

    def nearest(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1])
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                top = target.partition(".")[0]
                if top not in PACKAGES:
                    sibling = f"{package}.{target}"  # a sweep file run as a script: `import bases`
                    if mod.startswith("sweeps.") and nearest(sibling) not in (None, "sweeps"):
                        target = sibling
                    else:
                        external[mod].add(top)
                        continue
                found = nearest(target)
                while found:  # the module and every package above it
                    if found != mod and not mod.startswith(found + "."):
                        graph[mod].add(found)
                    found = found.rpartition(".")[0] or None
    return graph, external


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    def real(a: str, b: str) -> bool:  # a package's __init__ importing its own child
        return not b.startswith(a + ".")

    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if not real(v, w) or w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def layer(mod: str) -> str:
    if mod.startswith("sweeps"):
        return "sweeps"
    if mod.startswith("analysis"):
        return "analysis"
    if _within(mod, ORCHESTRATION):
        return "orchestration"
    return "core"


def problems(root: Path) -> list[str]:
    graph, external = imports(root)
    out = [f"circle: {' -> '.join(c)}" for c in circles(graph)]
    for mod, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if (mod, dep) in ALLOWED:
                continue
            a, b = layer(mod), layer(dep)
            why = None
            if _within(mod, ["icl_core.models"]) and _within(dep, ["icl_core.tasks"]) or \
                    _within(mod, ["icl_core.tasks"]) and _within(dep, ["icl_core.models"]):
                why = "models and tasks never import each other"
            elif a == "core" and b != "core":
                why = f"core imports {b}"
            elif a == "analysis" and b in ("orchestration", "sweeps"):
                why = f"analysis imports {b}"
            elif a == "orchestration" and b == "sweeps":
                why = "orchestration imports a sweep file (load them by name: icl_core.catalog)"
            if why:
                out.append(f"{mod} -> {dep}: {why}")
        if layer(mod) == "core":
            for name in sorted(external[mod] & set(RAY)):
                out.append(f"{mod} -> {name}: core imports Ray")
    return out


def test_the_project_has_no_import_circles_and_no_forbidden_direction():
    found = problems(ROOT)
    assert found == [], "\n".join(found)
    assert all(why.strip() for why in ALLOWED.values())


def test_the_checker_finds_circles_and_forbidden_directions(tmp_path):
    """A small tree with one of each fault: the checker names every one."""
    files = {
        "icl_core/__init__.py": "",
        "icl_core/models/__init__.py": "from icl_core.models.m import M\n",
        "icl_core/models/m.py": "def f():\n    from icl_core.tasks.t import T  # lazy\n",
        "icl_core/tasks/__init__.py": "",
        "icl_core/tasks/t.py": "from ..config import C\nT = 1\n",
        "icl_core/config.py": "import ray\nfrom icl_core import train\n",
        "icl_core/train.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                             "    from icl_core.config import C\n",
        "icl_core/catalog.py": "",
        "analysis/__init__.py": "",
        "analysis/regenerate.py": "from icl_core import catalog\n",
        "sweeps/__init__.py": "",
        "sweeps/bases.py": "",
        "sweeps/axis.py": "import bases\nfrom icl_core.catalog import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = problems(tmp_path)
    assert "circle: icl_core.config -> icl_core.train" in found
    assert "icl_core.models.m -> icl_core.tasks.t: models and tasks never import each other" \
        in found
    assert "icl_core.config -> ray: core imports Ray" in found
    assert "analysis.regenerate -> icl_core.catalog: analysis imports orchestration" in found
    graph, _ = imports(tmp_path)
    assert "sweeps.bases" in graph["sweeps.axis"]  # a script's `import bases` is its sibling
    assert "icl_core.tasks" in graph["icl_core.models.m"]  # importing a module runs its package
    assert "icl_core.models.m -> icl_core.tasks: models and tasks never import each other" \
        in found  # its package, which Python runs first
    assert len(found) == 5, found
