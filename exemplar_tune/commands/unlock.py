"""The ``unlock`` command: remove the host claims of controllers that are gone."""

from __future__ import annotations

import argparse
import json
import secrets
from typing import Any

from exemplar_tune.commands import SUMMARIES
from exemplar_tune.commands.options import add_change_target
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK
from exemplar_tune.fleet.host_claims import describe, is_stale, machine_id
from exemplar_tune.fleet.hostlist import compress
from exemplar_tune.fleet.playbook_runs import run_playbook, runner
from exemplar_tune.terminal import join_lines

UNLOCK_EPILOG = """examples:
  exemplar-tune unlock -i hosts.yml --limit 'gpu[07-09]'     after a controller machine died
  exemplar-tune unlock --sysroot /srv/node07 --check          only show the claims

Each host keeps the claim of the controller that changes it now
(/var/lib/exemplar-tune/claim.json); apply, restore, tune, resume and sweep change nothing on a
host that another controller has claimed. A claim from this machine whose process is gone is
taken over by the next command by itself; a claim from another machine is kept until that
controller gives it back, or until this command removes it. A claim of a controller that still
runs on this machine is never removed: stop it first.
"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``unlock``."""
    cmd = sub.add_parser("unlock", help=SUMMARIES["unlock"],
                         description="Remove the claims that controllers which are gone left on "
                         "hosts (a controller machine that died, a state directory lost).",
                         epilog=UNLOCK_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_change_target(cmd)
    cmd.add_argument("--check", action="store_true", help="only show the claims; remove none")
    cmd.set_defaults(func=cmd_unlock)


def cmd_unlock(args: argparse.Namespace) -> int:
    """Read each host's claim; remove those whose controller is not a live process here."""
    found = run_playbook(runner(args, check=True), "claim", {"exemplar_claim_state": "absent"})
    claims = {host: data["claimed_by"] for host, data in found["hosts"].items()
              if host not in found["failed"]}
    live = {h: c for h, c in claims.items() if c and c.get("machine") == machine_id()
            and not is_stale(c)}
    gone = {h: c for h, c in claims.items() if c and h not in live}
    doc: dict[str, Any] = {"check": args.check, "removed": {}, "kept": live,
                           "unclaimed": sorted(h for h, c in claims.items() if not c),
                           "failed": {**found["failed"], **found["unreachable"]}}
    if gone and not args.check:
        removed = run_playbook(runner(args).limited(",".join(sorted(gone))), "claim", {
            "exemplar_claim_state": "absent",
            "exemplar_claim": {"token": secrets.token_hex(12),
                               "replace": sorted({c["token"] for c in gone.values()})}})
        doc["removed"] = {h: gone[h] for h in removed["hosts"] if h not in removed["failed"]}
        doc["failed"].update({**removed["failed"], **removed["unreachable"]})
    elif gone:
        doc["removed"] = gone
    _print(args, doc)
    return EXIT_FINDINGS if doc["kept"] or doc["failed"] else EXIT_OK


def _print(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """The claims found, as JSON or one line per host (every host name, claim field and
    reason escaped: a forged claim shows what it holds, and never starts a line)."""
    if args.format == "json":
        print(json.dumps(doc, indent=2))
        return
    print(join_lines(_lines(args.check, doc)))


def _lines(check: bool, doc: dict[str, Any]) -> list[str]:
    verb = "would remove" if check else "removed"
    lines = [f"{host}: {verb} the claim of {describe(claim)}"
             for host, claim in sorted(doc["removed"].items())]
    lines += [f"{host}: kept the claim of {describe(claim)}: that controller still runs here; "
              "stop it first" for host, claim in sorted(doc["kept"].items())]
    lines += [f"{host}: FAILED: {why}" for host, why in sorted(doc["failed"].items())]
    if doc["unclaimed"]:
        lines.append(f"{compress(doc['unclaimed'])}: no claim")
    return lines
