"""The package is a map of the data path (docs/architecture.md; CONTRIBUTING.md, "Rules every change follows"),
checked on the source: every import counts, at module level and inside functions (read with ``ast``, nothing
imported).

- No package imports one that imports it back: among ``autodist``'s packages, and among the rooms
  (sub-packages) of each package; nor does a module (the IR's classes aside).
- ``strategies/`` and ``kernel/`` sit side by side on ``plan/``: neither imports the other; ``plan/``
  imports no other package but the generated ``proto``, and only it imports the Strategy message;
  ``spec/`` does not import the kernel.
- ``runtime/``'s top holds at most ten modules (the rest live in rooms); no module is over 400 lines
  (generated ``_pb2`` modules aside: they are in the tree, so that an import of one is seen, but their length is
  protoc's); no module imports a private (``_name``) module of another package.

The scanner is checked first on a small tree with each fault planted, so that these tests can fail.
"""
import ast
import collections
import os
import textwrap

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "autodist")
MAX_LINES = 400
MAX_RUNTIME_TOP = 10


class Tree:
    """The modules of a package tree (``{dotted name: path}``) and every autodist import each makes."""

    def __init__(self, root):
        self.top = os.path.basename(root)
        self.modules, self.packages, self.generated = {}, set(), set()
        for directory, _, files in os.walk(root):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    dotted = os.path.relpath(path[:-3], os.path.dirname(root)).replace(os.sep, ".")
                    if name == "__init__.py":
                        dotted = dotted[:-len(".__init__")]
                        self.packages.add(dotted)
                    if name.endswith("_pb2.py"):
                        self.generated.add(dotted)
                    self.modules[dotted] = path
        self.imports = {m: sorted(set(self._imports(m))) for m in self.modules}   # m -> [(target module, line)]

    def _imports(self, module):
        path = self.modules[module]
        package = module if module in self.packages else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            for name in self._names(node, package):
                target = self._module_of(name)
                if target is not None and target != module:
                    yield target, node.lineno

    def _names(self, node, package):
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            return [base] + ["{}.{}".format(base, alias.name) for alias in node.names]
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            return [node.args[0].value]
        return []

    def _module_of(self, name):
        """The longest module of the tree that ``name`` names (``a.b.c`` of ``from a.b import c`` is a
        module or a name in ``a.b``)."""
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name if name.split(".")[0] == self.top else None

    def unit(self, module, package):
        """The room of ``package`` that holds ``module`` (a direct sub-package), or None."""
        if not module.startswith(package + "."):
            return None
        room = package + "." + module[len(package) + 1:].split(".")[0]
        return room if room in self.packages else None

    def edges(self, package):
        """``{(room, room): [(module, line, target)]}`` between the rooms of ``package``."""
        found = collections.defaultdict(list)
        for module, targets in self.imports.items():
            source = self.unit(module, package)
            for target, line in targets:
                sink = self.unit(target, package)
                if source and sink and source != sink:
                    found[source, sink].append((module, line, target))
        return found

    def cycles(self):
        """``"a <-> b: module:line"`` for rooms (of any package) that import each other, directly or through
        others: ``a`` imports ``b`` at ``module:line``, and ``b`` reaches ``a``."""
        found = []
        for package in sorted(self.packages):
            edges = self.edges(package)
            graph = collections.defaultdict(set)
            for a, b in edges:
                graph[a].add(b)
            pairs = sorted({tuple(sorted((a, b))) for a, b in edges if _reaches(graph, b, a)})
            for a, b in pairs:
                first = edges[a, b][0] if (a, b) in edges else edges[b, a][0]
                found.append("{} <-> {}: {}:{}".format(a, b, *first[:2]))
        return found

    def module_cycles(self):
        """Groups of modules that import each other, directly or through others (a package's ``__init__``
        and its own modules aside: loading one's package is not a dependency on its siblings)."""
        graph = {m: {t for t, _ in targets if not (_inside(m, t) and t in self.packages)
                     and not (m in self.packages and _inside(t, m))} for m, targets in self.imports.items()}
        return sorted(sorted(group) for group in _strongly_connected(graph) if len(group) > 1)

    def imports_between(self, source_package, target_package):
        """``"module:line -> target"`` for every import of ``target_package`` inside ``source_package``."""
        return ["{}:{} -> {}".format(module, line, target) for module, targets in sorted(self.imports.items())
                if _inside(module, source_package) for target, line in targets if _inside(target, target_package)]

    def private_imports(self):
        """Imports of a private module (a ``_name`` part) by a module outside the package that holds it."""
        found = []
        for module, targets in sorted(self.imports.items()):
            for target, line in targets:
                parts = target.split(".")
                private = [i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")]
                if private and not _inside(module, ".".join(parts[:private[0]])):
                    found.append("{}:{} -> {}".format(module, line, target))
        return found

    def long_modules(self, limit=MAX_LINES):
        return ["{} ({} lines)".format(m, n) for m, n in sorted(
            (m, sum(1 for _ in open(p, encoding="utf-8"))) for m, p in self.modules.items()
            if m not in self.generated) if n > limit]

    def top_modules(self, package):
        return sorted(m for m in self.modules if m.rpartition(".")[0] == package and m not in self.packages)


def _reaches(graph, start, goal, seen=None):
    seen = set() if seen is None else seen
    for nxt in graph.get(start, ()):
        if nxt == goal:
            return True
        if nxt not in seen:
            seen.add(nxt)
            if _reaches(graph, nxt, goal, seen):
                return True
    return False


def _strongly_connected(graph):
    """Tarjan's strongly connected components of ``{node: {successor}}``, iteratively."""
    index, low, stack, on_stack, groups, counter = {}, {}, [], set(), [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is None:
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
                    groups.append(group)
            elif step not in index:
                index[step] = low[step] = counter[0]
                counter[0] += 1
                stack.append(step)
                on_stack.add(step)
                work.append((step, iter(sorted(graph.get(step, ())))))
            elif step in on_stack:
                low[node] = min(low[node], index[step])
    return groups


def _inside(module, package):
    return module == package or module.startswith(package + ".")


def strategy_message_imports(tree):
    """``"module:line -> target"`` for every import of the generated Strategy message outside ``<top>.plan``."""
    top = tree.top
    return [i for i in tree.imports_between(top, top + ".proto.strategy_pb2") if not i.startswith(top + ".plan.")]


@pytest.fixture(scope="module")
def tree():
    return Tree(ROOT)


# -- the scanner can fail -------------------------------------------------------------------------
def _plant(tmp_path, files):
    for path, text in files.items():
        full = tmp_path / "pkg" / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(textwrap.dedent(text))
    return Tree(str(tmp_path / "pkg"))


def test_the_scanner_finds_cycles_through_functions_private_imports_and_long_modules(tmp_path):
    planted = _plant(tmp_path, {
        "__init__.py": "", "a/__init__.py": "", "b/__init__.py": "", "c/__init__.py": "",
        "a/one.py": "from pkg.b import two\n",
        "b/two.py": "def late():\n    from ..c import three\n",                   # relative, in a function
        "c/three.py": "import importlib\ndef later():\n    importlib.import_module('pkg.a.one')\n",
        "c/_hidden.py": "x = 1\n" * (MAX_LINES + 1),
        "a/peek.py": "from pkg.c._hidden import x\n",
        "c/own.py": "from pkg.c import _hidden\n",                                   # its own package: fine
        "a/r/__init__.py": "", "a/s/__init__.py": "",
        "a/r/m.py": "from pkg.a.s import n\n", "a/s/n.py": "def f():\n    import pkg.a.r.m\n",
    })
    assert planted.module_cycles() == [["pkg.a.one", "pkg.b.two", "pkg.c.three"], ["pkg.a.r.m", "pkg.a.s.n"]]
    cycles = planted.cycles()
    assert any(c.startswith("pkg.a <-> pkg.b: pkg.a.one:1") for c in cycles), cycles
    assert any(c.startswith("pkg.a.r <-> pkg.a.s") for c in cycles), cycles
    assert planted.private_imports() == ["pkg.a.peek:1 -> pkg.c._hidden"]
    assert planted.long_modules() == ["pkg.c._hidden ({} lines)".format(MAX_LINES + 1)]
    assert planted.imports_between("pkg.b", "pkg.c") == ["pkg.b.two:2 -> pkg.c", "pkg.b.two:2 -> pkg.c.three"]
    assert planted.top_modules("pkg.c") == ["pkg.c._hidden", "pkg.c.own", "pkg.c.three"]


def test_the_scanner_sees_imports_of_generated_modules(tmp_path):
    generated = "# protoc's output\nDESCRIPTOR = None\n" + "_ = 1\n" * (MAX_LINES + 1)
    planted = _plant(tmp_path, {
        "__init__.py": "", "proto/__init__.py": "", "plan/__init__.py": "", "runtime/__init__.py": "",
        "proto/strategy_pb2.py": generated, "proto/other_pb2.py": generated,
        "plan/strategy.py": "from pkg.proto import strategy_pb2\n",                    # the plan may
        "runtime/peek.py": "import os\nfrom pkg.proto import strategy_pb2\n",          # nothing else may
        "runtime/late.py": "def f():\n    from ..proto.strategy_pb2 import Strategy\n",
        "runtime/fine.py": "from pkg.proto import other_pb2\n",
    })
    assert planted.generated == {"pkg.proto.strategy_pb2", "pkg.proto.other_pb2"}
    assert strategy_message_imports(planted) == ["pkg.runtime.late:2 -> pkg.proto.strategy_pb2",
                                                 "pkg.runtime.peek:2 -> pkg.proto.strategy_pb2"]
    assert planted.long_modules() == []   # protoc's length is not ours


# -- the tree --------------------------------------------------------------------------------------
def test_no_package_imports_one_that_imports_it_back(tree):
    assert tree.cycles() == []


def test_no_module_imports_one_that_imports_it_back_outside_the_ir(tree):
    # The IR's classes refer to one another as uTensor's do (graph <-> op <-> tensor, generic values <->
    # their converters); everywhere else a module that needs another's name gets it from below.
    assert [group for group in tree.module_cycles() if not all(_inside(m, "autodist.ir") for m in group)] == []


def test_planning_and_rewriting_do_not_import_each_other(tree):
    assert tree.imports_between("autodist.strategies", "autodist.kernel") == []
    assert tree.imports_between("autodist.kernel", "autodist.strategies") == []


def test_the_plan_is_the_bottom_layer(tree):
    packages = {t.split(".")[1] for m, targets in tree.imports.items() if _inside(m, "autodist.plan")
                for t, _ in targets if t.split(".")[1] != "plan" and "autodist." + t.split(".")[1] in tree.packages}
    assert packages <= {"proto"}
    assert tree.imports_between("autodist.spec", "autodist.kernel") == []


def test_only_the_plan_makes_strategy_messages(tree):
    # plan.strategy.assemble makes every new plan; plan.contract writes and reads its nodes
    assert "autodist.proto.strategy_pb2" in tree.generated, "build the protos first: pip install -e ."
    assert strategy_message_imports(tree) == []


def test_runtime_keeps_its_concerns_in_rooms(tree):
    top = tree.top_modules("autodist.runtime")
    assert len(top) <= MAX_RUNTIME_TOP, top


def test_no_module_is_over_400_lines(tree):
    assert tree.long_modules() == []


def test_no_module_imports_a_private_module_of_another_package(tree):
    assert tree.private_imports() == []
