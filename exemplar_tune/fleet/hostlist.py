"""Host lists in the compressed form Slurm prints: ``gpu[001-112,115],login1``.

:func:`compress` folds the last run of digits of names that share the rest (``gpu`` + number
+ ``""``), keeping zero padding (``gpu001`` and ``gpu1`` never fold together); :func:`expand`
reads that form back, ``[a-b]`` ranges and ``,`` lists, several brackets in one name
multiplying out (``rack[1-2]-n[1-2]``). ``expand(compress(hosts))`` gives the hosts back,
sorted; ``scontrol show hostnames`` reads what :func:`compress` writes. :func:`without_host`
makes the texts of hosts that differ only in their names equal, to fold them.
:func:`ansible_limit` lets ``--limit`` take hostlists beside Ansible's own patterns.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from exemplar_tune.inputs import one_line

MAX_DIGITS = 18  # a longer run of digits is part of the name, not a host number
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_HOSTLIST_ITEM = re.compile(r"^(!?)([^\[\]]*\[[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*\].*)$")
# Ansible's own subscript of a group: webservers[0], webservers[-1], webservers[0:2], [1:]
_SUBSCRIPT = re.compile(r"^[!&]?[^\[\]]+\[(?=[^\]]*[0-9])-?[0-9]*(?::-?[0-9]*)?\]$")
MAX_HOSTS = 100_000  # the most hosts one expression may name


def compress(hosts: Iterable[str]) -> str:
    """The hosts as one sorted, comma-separated hostlist expression (duplicates dropped)."""
    runs: dict[tuple[str, str, int], list[int]] = {}
    plain: list[str] = []
    for name in set(hosts):
        split = last_number(name)
        if split is None:
            plain.append(name)
            continue
        prefix, digits, suffix = split
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        runs.setdefault((prefix, suffix, width), []).append(int(digits))
    runs = _merge_natural(runs)
    parts = [(prefix, min(numbers), _render(prefix, suffix, width, sorted(numbers)))
             for (prefix, suffix, width), numbers in runs.items()]
    parts += [(name, -1, name) for name in plain]
    return ",".join(text for _, _, text in sorted(parts))


def last_number(name: str) -> tuple[str, str, str] | None:
    """``(prefix, digits, suffix)`` around the last run of ASCII digits of ``name`` (``None``
    when it has none, or a run longer than :data:`MAX_DIGITS`), in one pass from the end."""
    end = len(name)
    while end and not "0" <= name[end - 1] <= "9":
        end -= 1
    start = end
    while start and "0" <= name[start - 1] <= "9":
        start -= 1
    if start == end or end - start > MAX_DIGITS:
        return None
    return name[:start], name[start:end], name[end:]


def _merge_natural(runs: dict[tuple[str, str, int], list[int]]
                   ) -> dict[tuple[str, str, int], list[int]]:
    """Numbers written without a leading zero join a padded run of their own length
    (``gpu100`` belongs with ``gpu001``-``gpu099``)."""
    merged: dict[tuple[str, str, int], list[int]] = {}
    for (prefix, suffix, width), numbers in sorted(runs.items(), key=lambda kv: -kv[0][2]):
        if width:
            merged[(prefix, suffix, width)] = list(numbers)
            continue
        for number in numbers:
            key = (prefix, suffix, len(str(number)))
            target = key if key in merged else (prefix, suffix, 0)
            merged.setdefault(target, []).append(number)
    return merged


def _render(prefix: str, suffix: str, width: int, numbers: list[int]) -> str:
    text = [f"{n:0{width}d}" for n in numbers]
    if len(numbers) == 1:
        return f"{prefix}{text[0]}{suffix}"
    ranges: list[list[int]] = []
    for i, number in enumerate(numbers):
        if ranges and number == numbers[ranges[-1][1]] + 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    body = ",".join(text[a] if a == b else f"{text[a]}-{text[b]}" for a, b in ranges)
    return f"{prefix}[{body}]{suffix}"


def without_host(text: str, host: str) -> str:
    """``text`` with the host's own name, where it stands as a whole word, written ``{host}``:
    what hosts that differ only in their names have in common, to fold them."""
    return re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", "{host}", text)


def named(text: str, hosts: list[str]) -> str:
    """A reason folded by :func:`without_host` as an operator reads it: the host's own name
    back where one host gave it, ``<host>`` (each host's own name) where several did."""
    return text.replace("{host}", hosts[0] if len(hosts) == 1 else "<host>")


def expand(expression: str) -> list[str]:
    """The host names of a hostlist expression, in the order written.

    Raises ``ValueError`` (one line) on unbalanced brackets, an empty name, a bad range, or an
    expression naming more than :data:`MAX_HOSTS` hosts (counted before any is spelt out).
    """
    total = count_hosts(expression)
    if total > MAX_HOSTS:
        raise ValueError(f"hostlist {_shown(expression)} names {total} hosts, more than "
                         f"{MAX_HOSTS}")
    hosts: list[str] = []
    for part in _split_top_level(expression):
        pieces = _BRACKET.split(part)  # text, range, text, range, ..., text
        choices = [[piece] if i % 2 == 0 else _range_items(piece, expression)
                   for i, piece in enumerate(pieces)]
        hosts += ["".join(combo) for combo in itertools.product(*choices)]
    return hosts


def count_hosts(expression: str) -> int:
    """How many names the hostlist ``expression`` spells out, counted without spelling any;
    ``ValueError`` (one line) when it is malformed."""
    total = 0
    for part in _split_top_level(expression):
        if not part or "[" in _BRACKET.sub("", part) or "]" in _BRACKET.sub("", part):
            raise ValueError(f"bad hostlist {_shown(expression)}: empty name or unbalanced "
                             "brackets")
        size = 1
        for body in _BRACKET.findall(part):
            size *= sum(last - start + 1 for _, start, last in _ranges(body, expression))
        total += size
    return total


def _shown(text: str) -> str:
    """``text`` quoted for a message, its middle left out when it is long (a ``--limit`` may
    be as long as a command line)."""
    return one_line(repr(text), 120)


def _split_top_level(expression: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in expression.strip():
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    return [*parts, "".join(current)]


def _ranges(body: str, expression: str) -> list[tuple[str, int, int]]:
    """``(first as written, first, last)`` of each range of a bracket's ``body``."""
    found = []
    for token in body.split(","):
        first, dash, last = token.partition("-")
        last = last if dash else first
        if not (first.isdigit() and last.isdigit()) or int(last) < int(first):
            raise ValueError(f"bad hostlist {_shown(expression)}: range {_shown(token)}")
        found.append((first, int(first), int(last)))
    return found


def _range_items(body: str, expression: str) -> list[str]:
    return [f"{n:0{len(first)}d}" for first, start, last in _ranges(body, expression)
            for n in range(start, last + 1)]


def ansible_limit(pattern: str | None) -> str | None:
    """An Ansible ``--limit`` pattern with its hostlist items spelt out.

    ``node[01-03],!node02`` becomes ``node01,node02,node03,!node02``; an item's ``!`` applies
    to every host it names. Ansible's own subscripts (``group[0:2]``), wildcards, ``&`` and
    ``~regex`` items are left as they are. ``ValueError`` on a malformed hostlist, on any
    other item with a bracket (a lone ``[``: Ansible would match every host), and when the
    items name more than :data:`MAX_HOSTS` hosts in all (counted before any is spelt out).
    """
    if not pattern:
        return pattern
    items = [(item, _hostlist(item)) for item in _split_top_level(pattern)]
    total = sum(count_hosts(hostlist) if hostlist else 1 for _, hostlist in items)
    if total > MAX_HOSTS:
        raise ValueError(f"the pattern names {total} hosts, more than {MAX_HOSTS} (its "
                         f"{len(items)} items together; name a group, or fewer hosts)")
    spelt: list[str] = []
    for item, hostlist in items:
        if hostlist:
            negated = "!" if item.startswith("!") else ""
            spelt += [negated + host for host in expand(hostlist)]
        else:
            spelt.append(item)
    return ",".join(spelt)


def _hostlist(item: str) -> str | None:
    """The hostlist expression of a ``--limit`` item (``!`` taken off), ``None`` for an item
    Ansible reads itself; ``ValueError`` for an item whose brackets are neither."""
    match = _HOSTLIST_ITEM.match(item)
    if item.startswith("~"):
        return None
    if match:
        return match.group(2)
    if ("[" in item or "]" in item) and not _SUBSCRIPT.match(item):
        raise ValueError(f"{_shown(item)} is neither a hostlist (gpu[01-04]) nor a group "
                         "subscript (group[0:2]): brackets unbalanced or empty")
    return None
