"""``schema NAME``: the JSON Schema of a machine-readable output, as shipped."""

from __future__ import annotations

import argparse
import json

from exemplar_tune.commands import SUMMARIES
from exemplar_tune.errors import EXIT_OK
from exemplar_tune.json_schemas import SCHEMAS, schema

SCHEMA_EPILOG = "names:\n" + "\n".join(f"  {name:<12} {what}" for name, (_, what) in
                                       SCHEMAS.items()) + """

examples:
  exemplar-tune schema preflight > preflight.schema.json
  exemplar-tune preflight --format json > out.json && check-jsonschema --schemafile \\
      preflight.schema.json out.json

Every output document (preflight, audit, slow-nodes) carries schema_version; fields are only
ever added within one version.
"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``schema``."""
    cmd = sub.add_parser("schema", help=SUMMARIES["schema"],
                         description="Print the JSON Schema (draft 2020-12) of an output.",
                         epilog=SCHEMA_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("name", choices=list(SCHEMAS), metavar="NAME",
                     help=f"one of {', '.join(SCHEMAS)}")
    cmd.set_defaults(func=cmd_schema)


def cmd_schema(args: argparse.Namespace) -> int:
    """``exemplar-tune schema``."""
    print(json.dumps(schema(args.name), indent=2))
    return EXIT_OK
