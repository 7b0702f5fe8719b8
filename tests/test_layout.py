"""The package's shape (docs/design.md): imports only downward, no cycles, no model
branches outside the models, Numba code only in kernels modules, modules that read in a
sitting (500 lines a soft limit)."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "attnsim"
# Lowest first: a module may import its own layer or one below, never one above.
LAYERS = [
    ["_meta", "_build", "_revision", "metric_names", "registry", "presets", "words", "runtime",
     "runtime.workspace", "runtime.resources", "runtime.environment", "runtime.signals"],
    ["runtime.threads", "runtime.numba_cache", "config", "config_files", "config_values", "config_rules",
     "keys"],
    ["data", "init", "results", "storage", "metrics", "theory", "optimizers"],
    ["models"],
    ["driver", "observers"],
    ["run", "training", "precision"],
    ["sweep"],
    ["experiments"],
    ["plotting", "boundaries", "sweep_plots", "report", "report_figures"],
    ["cli", "cli_args", "cli_run", "__init__"],
]  # fmt: skip
SOFT_LINES = 500  # a module past this is named in the warnings summary (cut it where its roles part)
MAX_LINES = 900  # ... and one past this does not read in a sitting at all


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)] = p
    return out


def _layer(name: str) -> int:
    best = None
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    assert best is not None, f"attnsim.{name} belongs to no layer of tests/test_layout.py"
    return best[0]


def _target(module: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    """The attnsim modules an import names (relative to the package)."""
    if node.level == 0:
        if not (node.module or "").startswith("attnsim"):
            return []
        base = node.module.split(".")[1:]
    else:
        package = [] if module == "__init__" else module.split(".") if is_pkg else module.split(".")[:-1]
        base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
    names = _modules()
    out = []
    for alias in node.names:
        cand = ".".join([*base, alias.name])
        out.append(cand if cand in names else ".".join(base) or "__init__")
    return out


def _top_level_imports(lazy: bool = False):
    """(module, the module it imports, line) for every import at a module's top level (with
    ``lazy``: inside functions too)."""
    mods = _modules()
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree) if lazy else tree.body:
            if isinstance(node, ast.ImportFrom):
                for target in _target(name, is_pkg, node):
                    yield name, target, node.lineno
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("attnsim."):
                        yield name, alias.name.removeprefix("attnsim."), node.lineno


def test_imports_run_only_downward_and_form_no_cycle():
    """Every import, those inside functions (lazy: start-up) included, points down the layer
    table; the top-level imports form no cycle."""
    edges: dict[str, set[str]] = {}
    upward = []
    top = set(_top_level_imports())
    for src, dst, line in _top_level_imports(lazy=True):
        if dst == "__init__" or src == dst:
            continue
        if (src, dst, line) in top:
            edges.setdefault(src, set()).add(dst)
        if _layer(dst) > _layer(src):
            upward.append(f"attnsim/{src}:{line} imports {dst} (a higher layer)")
        if src.startswith("models.") and dst.startswith("models."):
            a, b = src.split(".")[1], dst.split(".")[1]
            # the modules beside the model packages (base, formats, gradcheck) are shared by them
            shared = not (ROOT / "models" / b).is_dir() or not (ROOT / "models" / a).is_dir()
            if not shared and a != b:
                upward.append(f"attnsim/{src}:{line} imports another model's {dst}")
    assert not upward, "\n".join(upward)
    seen, stack, cycles = set(), [], []

    def visit(v):
        if v in stack:
            cycles.append(stack[stack.index(v) :] + [v])
            return
        if v in seen:
            return
        seen.add(v)
        stack.append(v)
        for w in edges.get(v, ()):
            visit(w)
        stack.pop()

    for v in list(edges):
        visit(v)
    assert not cycles, cycles


def test_imports_inside_functions_say_why():
    """Allowed only for optional dependencies and the commands' lazy start-up, each with its reason."""
    bare = []
    for name, path in _modules().items():
        lines = path.read_text().split("\n")
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and "#" not in lines[node.lineno - 1]:
                        bare.append(f"attnsim/{name}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not bare, "\n".join(bare)


def test_no_module_branches_on_a_model_or_engine_name_outside_the_models():
    """Model and engine knowledge lives in attnsim/models/ (and the registry's plain data):
    no comparison with a model's or an engine's name, no tuple of engine names, elsewhere.
    (A figure may still pin a config value, engine = "reduced", as a sweep file does.)"""
    names = "encoder|attention|dense|reduced|implicit"
    pattern = re.compile(
        rf"""(?<!data_)model\s*[!=]=|engine\s*[!=]=|["']({names})["']\s*(==|!=|in\b)|(==|!=)\s*["']({names})["']"""
        rf"""|\(["']auto["'],\s*["']dense["']"""
    )
    found = [
        f"{p.relative_to(ROOT.parent)}:{i}: {line.strip()}"
        for p in ROOT.rglob("*.py")
        if "models" not in p.relative_to(ROOT).parts[:1] and p.name != "registry.py"
        for i, line in enumerate(p.read_text().split("\n"), 1)
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_reads_in_a_sitting(path):
    """500 lines is a soft limit: a module past it says why in its docstring ("kept in one
    module": modules are cut where their roles part, never to pass a count); 900 a hard one."""
    text = path.read_text()
    lines = len(text.split("\n")) - 1
    assert lines <= MAX_LINES
    if lines > SOFT_LINES:
        doc = ast.get_docstring(ast.parse(text)) or ""
        assert "kept in one module" in " ".join(doc.split()).lower(), (
            f"attnsim/{path.relative_to(ROOT)} has {lines} lines: split it where its roles part, or say "
            "in its docstring why it is kept in one module"
        )


def test_numba_code_lives_in_kernels_modules_only():
    """A Numba function and what it calls in one kernels file (numba's cache does not
    notice edits to callees in other files); no literal fastmath=True (STYLE.md)."""
    bad = []
    for p in ROOT.rglob("*.py"):
        text = p.read_text()
        if re.search(r"fastmath\s*=\s*True", text):
            bad.append(f"{p}: a literal fastmath on")
        if re.search(r"^\s*@(numba\.)?njit", text, re.M) and not p.stem.endswith("kernels"):
            bad.append(f"{p}: @njit outside a kernels module")
    assert not bad, bad


def test_every_folder_of_the_package_is_a_package_that_an_install_ships():
    # a folder without __init__.py imports from a checkout (a namespace package) but is left
    # out of a wheel by ``packages = find:``: a non-editable install then fails to import
    from setuptools import find_packages  # here: only this test needs setuptools

    found = set(find_packages(str(ROOT.parent), include=["attnsim", "attnsim.*"]))
    folders = {
        ".".join(p.parent.relative_to(ROOT.parent).parts)
        for p in ROOT.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert folders - found == set(), "folders with modules but no __init__.py"
