"""New nodes inserted where they belong: the graph stays topologically sorted.

A graph rule that adds a node (a Cast before a blocked node, after it, after a
graph input) says which node it serves; :func:`insert_nodes` puts it in the
innermost graph that sees every node it serves and, in that graph's node list,
right before the first node that uses its output (itself or through a
subgraph), or right after the node that produces its input. The graph's other
nodes keep their order and stay the same objects (a caller may hold them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

__all__ = ["Insertion", "Scope", "insert_nodes"]


@dataclass(eq=False)
class Scope:
    """A graph: the main graph, or a subgraph of a node of ``parent``."""

    graph: onnx.GraphProto
    parent: Scope | None = None
    depth: int = 0

    def child(self, graph: onnx.GraphProto) -> Scope:
        """The scope of ``graph``, a subgraph of one of this graph's nodes."""
        return Scope(graph, self, self.depth + 1)


@dataclass(eq=False)
class Insertion:
    """A node to insert and its output's value_info.

    Attributes:
        node: the node (copied into the graph).
        value_info: its output's, added to the same graph.
        after: placed right after the node producing its input (else right
            before the first node using its output).
        scopes: the graphs of the nodes it serves; it goes into the innermost
            graph enclosing them all.
    """

    node: onnx.NodeProto
    value_info: onnx.ValueInfoProto
    after: bool
    scopes: list[Scope] = field(default_factory=list)


def _innermost(scopes: list[Scope]) -> Scope:
    """The innermost graph enclosing every graph of ``scopes``."""
    common = scopes[0]
    for scope in scopes[1:]:
        while scope.depth > common.depth:
            scope = scope.parent
        while common.depth > scope.depth:
            common = common.parent
        while scope is not common:
            scope, common = scope.parent, common.parent
    return common


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs = [a.g for a in node.attribute if a.HasField("g")]
    return graphs + [g for a in node.attribute for g in a.graphs]


def _used_inside(node: onnx.NodeProto) -> set[str]:
    """Every name the nodes of ``node``'s subgraphs use, at any depth."""
    names: set[str] = set()
    stack = _subgraphs(node)
    while stack:
        for inner in stack.pop().node:
            names.update(inner.input)
            stack.extend(_subgraphs(inner))
    return names


def insert_nodes(insertions: list[Insertion]) -> None:
    """Insert each node into its graph, where it keeps the graph sorted.

    A node serving several graphs goes into the innermost graph enclosing them,
    unless they read its input from different definitions (sibling branches may
    each define a name): then each definition gets its own copy, in the innermost
    graph of the nodes that read that one.

    Args:
        insertions: the nodes, in the order they were made (the order of the
            value_info entries added to each graph).
    """
    placed: list[tuple[Scope, Insertion]] = []
    made: dict[int, set[str]] = {}  # names the insertions of one graph make there
    shared = []
    for insertion in insertions:
        scopes = list({id(s): s for s in insertion.scopes}.values())
        if len(scopes) == 1:
            placed.append((scopes[0], insertion))
            made.setdefault(id(scopes[0]), set()).update(insertion.node.output)
        else:
            shared.append(insertion)
    defined: dict[int, set[str]] = {}
    for insertion in shared:
        groups: dict[int, list[Scope]] = {}
        for scope in insertion.scopes:
            owner = _definition(scope, insertion.node.input[0], defined, made)
            groups.setdefault(id(owner), []).append(scope)
        for k, scopes in enumerate(groups.values()):
            placed.append((_innermost(scopes), insertion if k == 0 else _copy(insertion)))
    by_graph: dict[int, tuple[Scope, list[Insertion]]] = {}
    for scope, insertion in placed:
        by_graph.setdefault(id(scope), (scope, []))[1].append(insertion)
    for scope, batch in by_graph.values():
        _insert(scope.graph, batch)


def _definition(scope: Scope, name: str, defined: dict, made: dict) -> Scope:
    """The graph, ``scope`` or one enclosing it, whose node, input or initializer
    ``name`` is (the main graph when none is)."""
    while True:
        names = defined.get(id(scope))
        if names is None:
            graph = scope.graph
            names = {v.name for v in graph.input} | {t.name for t in graph.initializer}
            names |= {out for node in graph.node for out in node.output}
            names |= made.get(id(scope), set())
            defined[id(scope)] = names
        if name in names or scope.parent is None:
            return scope
        scope = scope.parent


def _copy(insertion: Insertion) -> Insertion:
    node, info = onnx.NodeProto(), onnx.ValueInfoProto()
    node.CopyFrom(insertion.node)
    info.CopyFrom(insertion.value_info)
    return Insertion(node, info, insertion.after, insertion.scopes)


def _insert(graph: onnx.GraphProto, batch: list[Insertion]) -> None:
    made = {out: new for new in batch for out in new.node.output}
    produced = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    following: dict[object, list[Insertion]] = {}  # after a node, after a new one, None: first
    for new in batch:
        if new.after:
            source = new.node.input[0]
            if source in made:
                anchor: object = ("new", id(made[source]))
            else:
                anchor = ("node", produced[source]) if source in produced else None
            following.setdefault(anchor, []).append(new)
    order: list[onnx.NodeProto | Insertion] = []
    placed: set[int] = set()

    def put(new: Insertion) -> None:
        if id(new) in placed:
            return
        placed.add(id(new))
        for name in new.node.input:
            if name in made:
                put(made[name])
        order.append(new)
        for follower in following.get(("new", id(new)), ()):
            put(follower)

    for new in following.get(None, ()):
        put(new)
    for i, node in enumerate(graph.node):
        for name in sorted((set(node.input) | _used_inside(node)) & made.keys()):
            put(made[name])
        order.append(node)
        for new in following.get(("node", i), ()):
            put(new)
    for new in batch:  # used by no node (the Cast of an unused graph input)
        put(new)
    for position, item in enumerate(order):
        if isinstance(item, Insertion):
            graph.node.insert(position, item.node)  # the other nodes stay the same objects
    graph.value_info.extend(new.value_info for new in batch)
