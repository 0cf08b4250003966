"""Line-aware loading of resource-spec YAML into a small tree of located values.

``yaml.safe_load`` forgets where each value came from, so a wrong type three
levels down could only be reported as "somewhere in the file". Instead the text
is *composed* (``yaml.compose``) into PyYAML's node tree, which keeps a mark on
every key and value, and converted into :class:`Node` values carrying their
1-based line. Plain Python data (``ResourceSpec.from_dict``) becomes the same
tree with ``line=None``, so one checker (``autodist.spec.schema``) serves both.

Two things ``safe_load`` accepts silently are errors here: a key given twice in
one mapping (PyYAML keeps the last) and an alias that contains itself.
``<<`` merge keys work as in YAML 1.1; explicit keys override merged ones.
"""
from typing import NamedTuple, Optional

import yaml

from autodist.errors import ResourceSpecError

__all__ = ["Node", "Entry", "Context", "MAX_VALUES", "parse_text", "tree_from_python", "child_path", "item_path"]


class Node:
    """A value of the document and the 1-based line it starts on (None if unknown).

    ``kind`` is "map" (``value`` is a list of :class:`Entry`), "seq" (a list of
    Node) or "scalar" (the constructed Python object).
    """

    __slots__ = ("kind", "value", "line")

    def __init__(self, kind, value, line):
        self.kind = kind
        self.value = value
        self.line = line


class Entry(NamedTuple):
    key: object
    line: Optional[int]
    node: Node


class Context:
    """What every error needs besides the problem: the file the tree came from.

    It also collects the problems of a whole file (:meth:`note`), so one load
    reports all of them at once (:meth:`raise_noted`) instead of the first only.
    """

    def __init__(self, path):
        self.path = path
        self.noted = []

    def error(self, problem, line, key):
        return ResourceSpecError(problem, path=self.path, line=line, key=key or None)

    def note(self, error):
        """Keep ``error`` (a ResourceSpecError, possibly a combined one) for :meth:`raise_noted`."""
        self.noted.extend(getattr(error, "problems", None) or (error,))

    def raise_noted(self):
        """Raise every noted problem as one ResourceSpecError, most specific first.

        A wrong value comes before an unknown key, which comes before a missing
        key (a missing key is often the consequence of a misspelt one); within
        each tier, problems follow the file. The error's ``path``, ``line`` and
        ``key`` are those of the first problem, its message has one line per
        problem and ``problems`` holds them all::

            spec.yml:6: ssh.conf.port: expected an integer port, got a string ('ssh')
            spec.yml:3: nodes[0].address: missing required key (...)
        """
        if not self.noted:
            return
        problems = sorted(self.noted, key=_specificity)
        first = problems[0]
        error = ResourceSpecError(first.problem, path=first.path, line=first.line, key=first.key)
        error.args = ("\n".join(str(p) for p in problems),)
        error.problems = tuple(problems)
        raise error


def _specificity(error):
    tier = 2 if error.problem.startswith("missing required key") else (
        1 if error.problem.startswith("unknown key") else 0)
    return tier, error.line if error.line is not None else 0


#: Composing stops after this many YAML values: PyYAML builds objects per value, so a file of
#: a million list items would take half a minute and gigabytes before any check could refuse it.
MAX_VALUES = 50000


class _TooManyValues(Exception):
    def __init__(self, line):
        super().__init__(line)
        self.line = line


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that stops after MAX_VALUES composed values."""

    def compose_node(self, parent, index):
        self._values = getattr(self, "_values", 0) + 1
        if self._values > MAX_VALUES:
            raise _TooManyValues(self.peek_event().start_mark.line + 1)
        return super().compose_node(parent, index)


def parse_text(text, path):
    """Compose YAML text into a Node tree; syntax errors report the parser's line."""
    try:
        root = yaml.compose(text, Loader=_BoundedLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ResourceSpecError("invalid YAML: " + _yaml_problem(exc), path=path,
                                line=mark.line + 1 if mark else 1) from None
    except _TooManyValues as exc:
        raise ResourceSpecError("more than {} values; a resource spec lists machines and devices and has a few "
                                "hundred (is this the right file?)".format(MAX_VALUES), path=path,
                                line=exc.line) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise ResourceSpecError("invalid YAML: special character #x{:04x} is not allowed".format(
            exc.character), path=path, line=line) from None
    if root is None:
        raise ResourceSpecError("the file is empty; a resource spec needs a 'nodes' list",
                                path=path, line=1)
    return _Converter(Context(path)).convert(root, "", None)


def _yaml_problem(exc):
    """PyYAML's problem and context as one phrase (its own str() spans several lines)."""
    problem, context = (exc.problem or "").strip(), (exc.context or "").strip()
    if problem.startswith("but ") and context:
        return "{}, {}".format(context, problem)
    if context:
        return "{} ({})".format(problem or "malformed YAML", context)
    return problem or "malformed YAML"


def child_path(path, key):
    """The key path of ``key`` under ``path``: ``child_path("nodes[1]", "gpus") == "nodes[1].gpus"``."""
    return "{}.{}".format(path, key) if path else str(key)


def item_path(path, index):
    """The key path of list item ``index`` of ``path``: ``item_path("nodes", 1) == "nodes[1]"``."""
    return "{}[{}]".format(path, index)


class _Converter:
    """Turns PyYAML nodes into Nodes; an aliased node is converted once and shared.

    ``path`` is the key path of the node being converted, for the errors found
    here (duplicate keys, recursive aliases, unsupported tags).
    """

    _MERGE = "tag:yaml.org,2002:merge"
    _PLAIN = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}

    def __init__(self, ctx):
        self.ctx = ctx
        self.constructor = yaml.constructor.SafeConstructor()
        self.done = {}
        self.active = set()

    def convert(self, node, path, key_line):
        if id(node) in self.done:
            return self.done[id(node)]
        line = node.start_mark.line + 1
        if isinstance(node, yaml.ScalarNode):
            if node.value == "" and key_line is not None:
                line = key_line   # an empty value belongs to its key's line
            return Node("scalar", self._construct(node, path), line)
        if node.tag not in self._PLAIN:
            raise self.ctx.error("unsupported YAML tag {!r}".format(node.tag), line, path)
        if id(node) in self.active:
            raise self.ctx.error("an alias refers to a node that contains it", line, path)
        self.active.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            value = [self.convert(item, item_path(path, i), None) for i, item in enumerate(node.value)]
            result = Node("seq", value, line)
        else:
            result = Node("map", self._entries(node, path), line)
        self.active.discard(id(node))
        self.done[id(node)] = result
        return result

    def _entries(self, node, path):
        first_line = {}
        for key_node, _ in node.value:
            if key_node.tag == self._MERGE:
                continue
            key, line = self._key(key_node, path), key_node.start_mark.line + 1
            if key in first_line:
                raise self.ctx.error("duplicate key (first given on line {})".format(
                    first_line[key]), line, child_path(path, key))
            first_line[key] = line
        try:
            # '<<' merge keys: merged entries come first, so explicit keys override them.
            self.constructor.flatten_mapping(node)
        except yaml.constructor.ConstructorError as exc:
            raise self.ctx.error("invalid '<<' merge: " + exc.problem,
                                 exc.problem_mark.line + 1, path) from None
        entries = {}
        for key_node, value_node in node.value:
            key, line = self._key(key_node, path), key_node.start_mark.line + 1
            entries[key] = Entry(key, line, self.convert(value_node, child_path(path, key), line))
        return list(entries.values())

    def _key(self, key_node, path):
        if not isinstance(key_node, yaml.ScalarNode):
            raise self.ctx.error("a mapping key must be a plain string",
                                 key_node.start_mark.line + 1, path)
        return self._construct(key_node, path)

    def _construct(self, node, path):
        try:
            return self.constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            raise self.ctx.error("unsupported YAML value: " + exc.problem,
                                 node.start_mark.line + 1, path) from None


def tree_from_python(data, path=None, _active=None):
    """The Node tree of plain Python data (dicts, lists, tuples, scalars), without lines."""
    active = set() if _active is None else _active
    if not isinstance(data, (dict, list, tuple)):
        return Node("scalar", data, None)
    if id(data) in active:
        raise ResourceSpecError("the resource spec data contains itself", path=path)
    active.add(id(data))
    if isinstance(data, dict):
        node = Node("map", [Entry(k, None, tree_from_python(v, path, active))
                            for k, v in data.items()], None)
    else:
        node = Node("seq", [tree_from_python(v, path, active) for v in data], None)
    active.discard(id(data))
    return node
