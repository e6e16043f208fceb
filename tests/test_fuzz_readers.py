"""Every host-file reader, given any text (or bytes), returns or raises the project's own error.

The readers are the ones the linear-time test feeds (every public function of the readers
package that takes the text or bytes it parses: :data:`tests.test_linear_time.TEXT_READERS`).
Hypothesis draws arbitrary text, soups of the tokens host files are made of, and real files
the readers are written for with text cut out and put in; a reader must answer with a value
or a ``HostStateError`` (a value converter may also answer with its documented error), never
another exception. The budget is fixed (examples per reader, derandomized) so CI runs it the
same way every time.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.conftest import FIXTURES
from tests.test_linear_time import (
    DECLARED,
    EXTRA,
    OWN_ERRORS,
    SEEDS,
    TEXT_READERS,
    reader_functions,
    takes_bytes,
)

# no health check: they time the generation, and a loaded machine must not fail the test
SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))

# what host files and command outputs are made of: separators, numbers, brackets, markup
TOKENS = st.sampled_from([
    " ", "  ", "\t", "\n", "\r\n", ":", "=", ",", ";", "-", "+", ".", "/", "|", "#", "*",
    "[", "]", "(", ")", "{", "}", "<", ">", "</", "/>", "'", '"', "\\", "0", "1", "7", "42",
    "-1", "4294967296", "9" * 30, "0x1f", "ff", "00000000:07:00.0", "0000:cb:00.0", "N/A",
    "GPU", "NVRM: Xid", "Link 0", "Id=", "CPU0", "node0", "[always]", "nccl", "\x00", "\u00b2",
    "\u0663", "\ufffd", "é",
])
SOUP = st.lists(st.one_of(TOKENS, st.text(max_size=4)), max_size=40).map("".join)


@st.composite
def mutated(draw: Any, seed: str) -> str:
    """``seed`` with a stretch cut out and text (a soup, or any) put in its place."""
    start = draw(st.integers(0, len(seed)))
    end = draw(st.integers(start, min(len(seed), start + 200)))
    filler = draw(st.one_of(SOUP, st.text(max_size=20)))
    return seed[:start] + filler + seed[end:]


def inputs(name: str) -> st.SearchStrategy[Any]:
    """What ``name`` is given: bytes for a reader of bytes; else any text, a token soup, or
    its real file (:data:`SEEDS`) mutated."""
    if takes_bytes(name):
        return st.binary(max_size=64)
    choices = [st.text(), SOUP]
    if name in SEEDS:
        choices.append(mutated((FIXTURES / SEEDS[name]).read_text(errors="replace")))
    return st.one_of(*choices)


@pytest.mark.parametrize("name", TEXT_READERS)
@SETTINGS
@given(data=st.data())
def test_reader_answers_any_input_with_a_value_or_its_own_error(name, data):
    value = data.draw(inputs(name), label="input")
    try:
        reader_functions()[name](value, *EXTRA.get(name, ()))
    except (*DECLARED, *OWN_ERRORS.get(name, ())):
        pass  # the project's own error: a one-line answer
