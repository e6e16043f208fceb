"""YAML from users and hosts with its aliases bounded, checked before any value is built.

An alias (``*name``) stands for its anchor's whole value, and anchors may alias anchors: ten
lines ("billion laughs") spell out a billion values, and anything that walks the result (a
schema check, its error message, a copy, Ansible's variables) spells them out. PyYAML builds
such a document cheaply, sharing the values, so the bound is taken on the parsed nodes:
the document's *expanded weight* (every alias spelt out) may exceed its own weight (each
node counted once) by at most :data:`MAX_GROWTH` values, or :data:`GROWTH_RATIO` times its
own weight where that is more, so that ``<<: *defaults`` on every host of a large inventory
stays allowed. A node weighs 1, a scalar 1 more per :data:`SCALAR_CHUNK` characters. An alias
inside its own anchor (a cycle) never ends and is refused too. Every refusal is a one-line
``UserError`` naming the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from exemplar_tune.errors import UserError

MAX_GROWTH = 100_000  # values that aliases may add to any document
GROWTH_RATIO = 10  # ... or this many times the document's own weight
SCALAR_CHUNK = 64  # characters of a scalar that weigh as much as one value

# libyaml's parser where PyYAML has it (the same nodes, faster); else the Python one
_FAST = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str, what: str) -> Any:
    """The value of the one YAML document of ``text``, as ``yaml.safe_load`` gives it.

    Raises ``UserError`` (one line, starting with ``what``: "profile site.yaml") when its
    aliases expand past the bound, before any value is built; ``yaml.YAMLError`` as
    ``yaml.safe_load`` does for text that is not YAML (the caller words it).
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_node(node, what)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def check_aliases(text: str, what: str) -> None:
    """``UserError`` when any document of ``text`` expands past the bound (for files another
    program reads, such as Ansible's inventories); text that is not YAML passes (its reader
    reports it)."""
    try:
        for node in _documents(text):
            check_node(node, what)
    except yaml.YAMLError:
        return


def check_node(root: yaml.Node, what: str) -> None:
    """``UserError`` when the document ``root`` expands past the bound (see the module)."""
    own = _own_weight(root)
    limit = own + max(MAX_GROWTH, GROWTH_RATIO * own)
    if _expanded_weight(root, limit) > limit:
        raise UserError(f"{what}: its aliases (*name) expand to more than {limit - own:,} "
                        "values (a YAML alias bomb?): write the values out instead")


def _documents(text: str) -> Iterator[yaml.Node]:
    loader = _FAST(text)
    try:
        while loader.check_node():
            yield loader.get_node()
    finally:
        loader.dispose()


def _weight(node: yaml.Node) -> int:
    if isinstance(node, yaml.ScalarNode):
        return 1 + len(node.value) // SCALAR_CHUNK
    return 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _own_weight(root: yaml.Node) -> int:
    """The weight of the distinct nodes reachable from ``root``, each counted once."""
    seen: dict[int, yaml.Node] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(_children(node))
    return sum(map(_weight, seen.values()))


def _expanded_weight(root: yaml.Node, stop: int) -> int:
    """The weight of ``root`` with every alias spelt out, counted once per distinct node
    (linear time); any value above ``stop`` once it passes ``stop`` or meets a cycle."""
    done: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose subtree is being counted: the path from the root
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_counted = stack.pop()
        key = id(node)
        if children_counted:
            open_.discard(key)
            done[key] = min(stop + 1, _weight(node) + sum(done[id(c)] for c in _children(node)))
            continue
        if key in done:
            continue
        if key in open_:
            return stop + 1  # an alias inside its own anchor
        open_.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in done)
    return done[id(root)]
