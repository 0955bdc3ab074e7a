"""The package's shape: layers import downwards only, and ``import streamkit`` loads no
heavy library (issue 20); no import circle between files, the runtime's rooms one-way,
serdes free of any transport, no module over 500 lines without a reason (issue 35).

An import inside a function, or under ``if TYPE_CHECKING``, counts too: it is still a
dependency of the module. Only :func:`test_no_module_level_import_cycle` looks at
module-level imports alone (what Python runs while importing a module)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, Iterator, List, Set, Tuple

import streamkit

PACKAGE = Path(streamkit.__file__).parent

LAYERS: Dict[str, int] = {
    # 0: depends on nothing of streamkit (but errors)
    "errors": 0, "core": 0, "faults": 0,
    # 1: values on the wire, the broker interface, the embedded broker
    "serdes": 1, "transport": 1, "broker": 1, "schemas": 1,
    # 2: time and declarations
    "windowing": 2, "stores": 2, "topics": 2,
    # 3: the IR, state, connectors, the Processor API's interfaces
    "topology": 3, "processor": 3, "state": 3, "sinks": 3, "sources": 3,
    # 4: the DSL that builds the IR
    "dsl": 4,
    # 5: the runtime that runs it
    "runtime": 5,
    # 6: what users run: the app, the test driver, the Spark replay, operating workers
    "app": 6, "testing": 6, "spark": 6, "operations": 6, "mirror": 6,
    # 7: entry points
    "cli": 7, "__main__": 7, "__init__": 7,
}
HEAVY = ("rocksdict", "aiokafka", "pyarrow", "pyspark", "sqlalchemy", "psycopg", "kafka", "aiohttp",
         "prometheus_client", "fastavro", "avro", "jsonschema", "google.protobuf", "grpc_tools", "confluent_kafka")


def _modules() -> Iterator[Tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield ".".join(("streamkit",) + parts), path


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(module: str, path: Path) -> Set[str]:
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - node.level + 1]
            found.add(".".join(base + ([node.module] if node.module else [])))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("streamkit"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("streamkit"))
    return found


def _assert_acyclic(graph: Dict[str, Set[str]]) -> None:
    """Fail naming the first import cycle found in ``graph`` (depth first, sorted)."""
    state: Dict[str, int] = {}

    def visit(node: str, trail: Tuple[str, ...]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join(trail + (node, nxt))}"
            if nxt not in state:
                visit(nxt, trail + (node,))
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, ())


def test_every_top_level_module_has_a_layer() -> None:
    tops = {_top(module) for module, _path in _modules()}
    assert tops <= set(LAYERS), f"add these to LAYERS: {sorted(tops - set(LAYERS))}"


def test_layers_import_only_downwards() -> None:
    upward = []
    for module, path in _modules():
        source = _top(module)
        for target in _imports(module, path):
            destination = _top(target)
            if destination != source and LAYERS[destination] > LAYERS[source]:
                upward.append(f"{module} imports {target} (layer {LAYERS[source]} -> {LAYERS[destination]})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_cycle_between_top_level_packages() -> None:
    graph: Dict[str, Set[str]] = {}
    for module, path in _modules():
        graph.setdefault(_top(module), set()).update(
            _top(target) for target in _imports(module, path) if _top(target) != _top(module))
    _assert_acyclic(graph)


def test_import_streamkit_loads_no_heavy_library() -> None:
    probe = ("import sys, streamkit; "
             f"print(','.join(m for m in {HEAVY!r} if m in sys.modules)); "
             "print(','.join(sorted(m for m in sys.modules if m.startswith(('streamkit.runtime', 'streamkit.state')))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "", f"import streamkit loaded {out[0]}"
    assert out[1] == "", f"import streamkit loaded the runtime or state layer: {out[1]}"


def test_the_public_names_resolve() -> None:
    namespace: Dict[str, object] = {}
    exec("from streamkit import *", namespace)
    assert set(streamkit.__all__) <= set(namespace)
    assert streamkit.spark.replay is not None  # loads on first use


def _module_level_imports(module: str, path: Path, known: Set[str]) -> Set[str]:
    """The streamkit modules ``module`` imports when it is imported (module scope; not
    inside functions, nor under ``if TYPE_CHECKING``)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: Set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for statement in (node.body if isinstance(node, ast.If) else [node]):
            if isinstance(statement, ast.ImportFrom):
                target = (".".join(package[:len(package) - statement.level + 1]
                                   + ([statement.module] if statement.module else []))
                          if statement.level else statement.module or "")
                found.update(f"{target}.{a.name}" for a in statement.names if f"{target}.{a.name}" in known)
                if target in known:
                    found.add(target)
            elif isinstance(statement, ast.Import):
                found.update(a.name for a in statement.names if a.name in known)
    return found


def test_no_module_level_import_cycle() -> None:
    """No module needs, while it is being imported, a module that needs it back (the
    compiler imports the operators, never the reverse)."""
    paths = {(module[:-len(".__init__")] if module.endswith(".__init__") else module): path
             for module, path in _modules()}
    graph = {module: _module_level_imports(module, path, set(paths)) - {module} for module, path in paths.items()}
    _assert_acyclic(graph)


# --------------------------------------------------------------- issue 35: files

def _known_modules() -> Dict[str, Path]:
    """Every module by dotted name (a package by its own name, not ``.__init__``)."""
    return {(module[:-len(".__init__")] if module.endswith(".__init__") else module): path
            for module, path in _modules()}


def _file_imports(module: str, path: Path, known: Set[str]) -> Set[str]:
    """The streamkit modules ``module`` imports anywhere in its file (module scope, in
    functions, under ``if TYPE_CHECKING``), resolved to modules: ``from .x import y``
    is ``x.y`` when ``y`` is a module, else ``x``."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            target = (".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                      if node.level else node.module or "")
            submodules = {f"{target}.{a.name}" for a in node.names} & known
            found.update(submodules)
            if target in known and len(submodules) < len(node.names):
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
    return found - {module}


def _file_graph() -> Dict[str, Set[str]]:
    known = _known_modules()
    return {module: _file_imports(module, path, set(known)) for module, path in known.items()}


def _circles(graph: Dict[str, Set[str]]) -> List[FrozenSet[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[FrozenSet[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(frozenset(group))
    return found


def test_no_import_circle_between_files() -> None:
    """No file needs, directly or through others, a file that needs it back; imports in
    functions and under ``TYPE_CHECKING`` count (a circle broken only at run time is
    still a circle to whoever reads or changes the code)."""
    circles = _circles(_file_graph())
    assert not circles, "files importing each other in a circle:\n" + "\n".join(
        " <-> ".join(sorted(c)) for c in circles)


def test_the_file_circle_check_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _circles(graph) == [frozenset({"a", "b", "c"})]


RUNTIME_ROOMS: Dict[str, int] = {"ordering": 0, "context": 1, "operators": 2, "task": 3, "worker": 4}
"""The rooms of ``runtime/`` (its sub-packages, issue 35 item 2) by rank: a room imports
only rooms of lower rank, never one above nor one beside it: the worker runs tasks,
tasks run the operators compiled for them, operators see their task through its
context, and all of them order records with the ordering room."""

WORKER_PARTS: Dict[str, int] = {"observations": 0, "standby": 0, "topics": 0, "view": 1, "committer": 1,
                                "tasks": 2, "loop": 3, "process": 4}
"""The modules of ``runtime/worker/`` by rank (issue 35 item 1): each object is called one
way, the loop calls the tasks and the committer, the tasks call the committer (through
a small interface they define), the committer neither."""


def _runtime_room(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "runtime" else ""


def test_every_runtime_module_is_in_a_room() -> None:
    rooms = {path.parent.name for path in (PACKAGE / "runtime").glob("*/__init__.py")}
    assert rooms <= set(RUNTIME_ROOMS), f"give these runtime rooms a rank in RUNTIME_ROOMS: {sorted(rooms - set(RUNTIME_ROOMS))}"
    loose = sorted(path.name for path in (PACKAGE / "runtime").glob("*.py") if path.name != "__init__.py")
    assert not loose, f"put these runtime modules in a room: {loose}"
    parts = {path.stem for path in (PACKAGE / "runtime" / "worker").glob("*.py") if path.name != "__init__.py"}
    assert parts == set(WORKER_PARTS), f"rank the worker's modules in WORKER_PARTS: {sorted(parts ^ set(WORKER_PARTS))}"


def test_runtime_rooms_import_one_way() -> None:
    wrong = []
    for module, targets in _file_graph().items():
        room = _runtime_room(module)
        if not room:
            continue
        for target in sorted(targets):
            other = _runtime_room(target) or (target.split(".")[2] if target.startswith("streamkit.runtime.")
                                               and target.split(".")[2] in RUNTIME_ROOMS else "")
            if other and other != room and RUNTIME_ROOMS[other] >= RUNTIME_ROOMS[room]:
                wrong.append(f"{module} ({room}) imports {target} ({other})")
    assert not wrong, "runtime rooms importing upwards or sideways:\n" + "\n".join(wrong)


def test_the_worker_parts_import_one_way() -> None:
    prefix = "streamkit.runtime.worker."
    wrong = [f"{module} imports {target}" for module, targets in _file_graph().items() if module.startswith(prefix)
             for target in sorted(targets) if target.startswith(prefix)
             and WORKER_PARTS[target[len(prefix):]] >= WORKER_PARTS[module[len(prefix):]]]
    assert not wrong, "worker modules importing upwards or sideways:\n" + "\n".join(wrong)


def _loaded_with(start: Iterable[str], graph: Dict[str, Set[str]]) -> Dict[str, str]:
    """Every module that importing ``start`` may load, each with the module that needs
    it; a module loads its parent packages too (the root ``streamkit`` aside: it is
    the entry point, loaded first by any import, and depends on everything)."""
    needed_by: Dict[str, str] = {}
    pending = list(start)
    while pending:
        module = pending.pop()
        parents = [".".join(module.split(".")[:n]) for n in range(2, len(module.split(".")))]
        for nxt in sorted(graph.get(module, set()) | {p for p in parents if p in graph}):
            if nxt not in needed_by and nxt not in start:
                needed_by[nxt] = module
                pending.append(nxt)
    return needed_by


def test_serdes_import_no_transport() -> None:
    """The layer that turns bytes into values needs no broker client, not even through
    the schema registry: a registry kept on a broker is installed by the package's
    entry point (``streamkit/__init__.py``), never imported by a serde."""
    graph = _file_graph()
    serdes = [m for m in graph if m == "streamkit.serdes" or m.startswith("streamkit.serdes.")]
    needed_by = _loaded_with(serdes, graph)
    reached = sorted(m for m in needed_by if _top(m) in ("transport", "broker"))

    def chain(module: str) -> str:
        links = [module]
        while links[-1] in needed_by:
            links.append(needed_by[links[-1]])
        return " <- ".join(links)

    assert not reached, "serdes reach a transport:\n" + "\n".join(chain(m) for m in reached)


MAX_LINES = 500
LONG_MODULES: Dict[str, str] = {
    "dsl/kinds.py": "the DSL's kinds return each other both ways; typed, they can only share one module "
                    "without a file circle (their building is in dsl/building/)",
    "broker/reader.py": "one class, the read loop: its methods share the reader's cursor on the broker's "
                        "hottest path (see its docstring)",
}
"""Modules allowed over MAX_LINES, by path under ``streamkit/``, each with its reason."""


def test_no_module_over_500_lines_without_a_reason() -> None:
    sizes = {path.relative_to(PACKAGE).as_posix(): len(path.read_text().splitlines())
             for _module, path in _modules()}
    long = sorted(f"{name} ({lines} lines)" for name, lines in sizes.items()
                  if lines > MAX_LINES and name not in LONG_MODULES)
    assert not long, f"split these modules, or list them in LONG_MODULES with the reason: {long}"
    stale = sorted(name for name in LONG_MODULES if sizes.get(name, 0) <= MAX_LINES)
    assert not stale, f"these modules are no longer over {MAX_LINES} lines: delete them from LONG_MODULES: {stale}"

