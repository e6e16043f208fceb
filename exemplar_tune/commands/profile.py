"""``profile list|show``: the shipped profiles, and any profile merged and validated."""

from __future__ import annotations

import argparse
import json

import yaml

from exemplar_tune.commands import SUMMARIES
from exemplar_tune.errors import EXIT_OK
from exemplar_tune.profile import load_profile, shipped_profiles


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``profile``."""
    _add_profile(sub)


PROFILE_EPILOG = """examples:
  exemplar-tune profile list                    the shipped profiles
  exemplar-tune profile show h100-x86           a shipped profile
  exemplar-tune profile show site.yaml          a site profile, its 'extends' chain merged

A site profile holds only what differs from the one it extends:

  extends: h100-x86            # a shipped name, or a path relative to this file
  cpu: {governor: performance}
  fabric: {nccl: {NCCL_IB_QPS_PER_CONNECTION: "2"}}

Mappings merge key by key, lists and values are replaced, null deletes a key the parent has.
"""


def _add_profile(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("profile", help=SUMMARIES["profile"],
                         description="The shipped profiles, and any profile as the commands "
                         "see it: its extends chain merged, validated.", epilog=PROFILE_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = cmd.add_subparsers(dest="step", required=True, metavar="list|show")
    steps.add_parser("list", help="the shipped profiles").set_defaults(func=cmd_profile_list)
    show = steps.add_parser("show", help="one profile, merged and validated")
    show.add_argument("profile", metavar="NAME|FILE",
                      help="a shipped profile's name (profile list) or a profile file")
    show.add_argument("--format", choices=("yaml", "json"), default="yaml",
                      help="output format (default yaml)")
    show.set_defaults(func=cmd_profile_show)


def cmd_profile_list(args: argparse.Namespace) -> int:
    """``exemplar-tune profile list``."""
    del args
    for name in shipped_profiles():
        print(name)
    return EXIT_OK


def cmd_profile_show(args: argparse.Namespace) -> int:
    """``exemplar-tune profile show``: the merged, validated profile."""
    profile = load_profile(args.profile)
    if args.format == "json":
        print(json.dumps(profile, indent=2))
    else:
        print(yaml.safe_dump(profile, sort_keys=False), end="")
    return EXIT_OK
