"""Errors the controller reports as one line with a documented exit code."""

from __future__ import annotations

import time
import traceback

from exemplar_tune.runs import state_dir

EXIT_OK = 0
EXIT_FINDINGS = 1  # checks failed, drift found, hosts unreachable
EXIT_USAGE = 2  # bad arguments or unusable input (profile, bundle, inventory ...)
EXIT_INTERNAL = 70  # a bug (sysexits EX_SOFTWARE): the traceback is written to a file
EXIT_BROKEN_PIPE = 141  # stdout closed by the reader (``| head``): 128 + SIGPIPE


class UserError(Exception):
    """Bad input from the user: printed as ``exemplar-tune: error: <message>``, exit 2."""

    exit_code = EXIT_USAGE


def crash_report(exc: BaseException) -> str:
    """Write ``exc``'s traceback under the state directory; one line naming it and the file."""
    directory = state_dir() / "crashes"
    text = "".join(traceback.format_exception(exc))
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{id(exc):x}.txt"
        path.write_text(text)
        where = f"traceback in {path}"
    except OSError:
        where = "the traceback could not be written"
    message = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {message} ({where})"
