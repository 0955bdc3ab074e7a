"""The package's shape: layers import downwards only, and ``import streamkit`` loads no
heavy library (issue 20). An import inside a function counts too: it is still a
dependency of the module."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, Set, Tuple

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
