"""Kernel CPU-list (``0-3,8,10-11``) and CPU-mask (``00000000,0003ffff``) formats.

Formats: ``Documentation/admin-guide/cputopology.rst`` (cpulist) and ``bitmap_parse`` in
``lib/bitmap.c`` (comma-separated 32-bit hex words, most significant first).

A CPU number is below :data:`MAX_CPUS` (the kernel's ``NR_CPUS`` is at most 8192): a list or
mask naming a higher one is refused, so a few characters (``0-4000000000``) never expand to
billions of CPUs.
"""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError

MAX_CPUS = 1 << 16


def parse_cpulist(text: str, source: str = "cpulist") -> list[int]:
    """``"0-3,8"`` -> ``[0, 1, 2, 3, 8]``; an empty string is an empty list.

    Also accepts the ``0-7:2/4`` stride form of ``isolcpus=``/``nohz_full=`` lists.
    """
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return []
    for chunk in text.split(","):
        try:
            cpus.update(_expand_chunk(chunk.strip()))
        except (ValueError, ZeroDivisionError):  # ZeroDivisionError: a stride of "/0"
            raise ParseError(source, text, "not a CPU list") from None
        except OverflowError:
            raise ParseError(source, text, f"CPU number of {MAX_CPUS} or more") from None
    return sorted(cpus)


def _cpu(token: str) -> int:
    """One CPU number; ``OverflowError`` from :data:`MAX_CPUS` on (read from at most 6
    digits: a longer number is never converted, whatever its length)."""
    number = int(token) if len(token.strip().lstrip("+").lstrip("0")) <= 6 else MAX_CPUS
    if number >= MAX_CPUS:
        raise OverflowError(token)
    return number


def _expand_chunk(chunk: str) -> range | list[int]:
    if "-" not in chunk:
        return [_cpu(chunk)]
    span, _, stride = chunk.partition(":")
    first, last = (_cpu(x) for x in span.split("-", 1))
    if last < first:
        raise ValueError(chunk)
    if not stride:
        return range(first, last + 1)
    used, group = (int(x) for x in stride.split("/", 1))
    return [c for c in range(first, last + 1) if (c - first) % group < used]


def format_cpulist(cpus: list[int] | set[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"`` (the kernel's own compact form)."""
    ordered = sorted(set(cpus))
    spans: list[str] = []
    start = prev = None
    for cpu in ordered + [None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            spans.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(spans)


def parse_cpumask(text: str, source: str = "cpumask") -> list[int]:
    """``"00000000,0003ffff"`` -> CPUs 0..17; an all-zero mask is an empty list. The bits are
    read off the mask's binary digits (shifting the number once per bit is quadratic)."""
    digits = text.strip().replace(",", "")
    if not digits:
        return []
    try:
        value = int(digits, 16)
    except ValueError:
        raise ParseError(source, text, "not a hex CPU mask") from None
    if value.bit_length() > MAX_CPUS:
        raise ParseError(source, text, f"a CPU mask of more than {MAX_CPUS} CPUs")
    return [bit for bit, one in enumerate(reversed(bin(value))) if one == "1"]
