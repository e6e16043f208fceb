"""Errors the controller reports as one line with a documented exit code."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1  # checks failed, drift found, hosts unreachable
EXIT_USAGE = 2  # bad arguments or unusable input (profile, bundle, inventory ...)


class UserError(Exception):
    """Bad input from the user: printed as ``exemplar-tune: error: <message>``, exit 2."""

    exit_code = EXIT_USAGE
