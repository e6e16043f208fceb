"""Files generated from the knob and check registries, and the one command that writes them.

``python -m exemplar_tune.registry_docs`` rewrites, from the registries alone:

* ``roles/<layer>/meta/argument_specs.yml`` for every layer with a role: each knob's switch,
  target overrides (typed and described from the profile key's schema) and settings, the
  layer's notes and options (``ROLE_SUMMARY``, ``ROLE_NOTES``, ``ROLE_OPTIONS`` beside its
  knobs), and the options every layer role shares;
* ``exemplar_tune/profiles/schema.json``, whole: ``schema-base.json`` (the keys no
  declaration owns) with each knob's ``profile_keys`` and each declared check's key;
* ``plugins/plugin_utils/knob_variable_names.py``: each layer's knob variables, for the
  ``exemplar.tune.knob_variables`` lookup;
* ``deploy/kubernetes/node-problem-detector-config.yaml``: node-problem-detector's plugin
  configuration, one node condition per layer with checks;
* the README's knob and check tables, its table of the command files a sos report holds
  (``plugins/module_utils/sos_commands.py``) and of the vendor settings the shipped profiles
  cannot express (their ``unexpressed`` lists), between ``<!-- generated: NAME -->`` and
  ``<!-- end: NAME -->``.

``--check`` writes nothing and exits 1 naming the stale files; the test suite runs it.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import import_module
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import Knob, Setting
from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    ROLE_LAYERS,
    get_layer,
    registered_knobs,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sos_commands import (
    MAPPED,
    NEVER,
    UNREAD,
    SosOutput,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import COMMANDS

from exemplar_tune.checks import CHECKS
from exemplar_tune.reports.npd import plugin_config_text

REPO = Path(__file__).resolve().parent.parent
SCHEMA = Path(__file__).resolve().parent / "profiles" / "schema.json"
SCHEMA_BASE = SCHEMA.with_name("schema-base.json")  # the keys no declaration owns
README = REPO / "README.md"
HEADER = ("# Generated from the knob registry (plugins/module_utils/knobs/) by\n"
          "# `python -m exemplar_tune.registry_docs`: edit the knobs, not this file.\n")
JSON_TYPES = {"boolean": "bool", "integer": "int", "number": "float", "string": "str",
              "array": "list", "object": "dict"}
BMC_OPTIONS: dict[str, dict[str, Any]] = {
    "exemplar_bmc_address": {"type": "str", "description": "The host's BMC (C(host), "
                             "C(host:port) or C(https://) URL); unset means no BMC."},
    "exemplar_bmc_user": {"type": "str", "description": "BMC user name."},
    "exemplar_bmc_password": {"type": "str", "description": "BMC password (Ansible Vault); "
                              "unset falls back to the controller's C(EXEMPLAR_BMC_PASSWORD) "
                              "environment variable. Never logged."},
    "exemplar_bmc_ca": {"type": "path", "description": "CA bundle that signs the BMC's TLS "
                        "certificate (pinning)."},
    "exemplar_bmc_validate_certs": {"type": "bool", "default": True, "description": "Verify "
                                    "the BMC's TLS certificate; false only for a lab BMC."},
}


class _Dumper(yaml.SafeDumper):
    """Block sequences indented under their key, as the collection's YAML is written."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:  # noqa: D102
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:  # noqa: D102 - every option written in full
        return True


def _layer_module(layer: str) -> Any:
    """``knobs/<layer>.py``, where the role's notes live beside the knobs."""
    return import_module(f"ansible_collections.exemplar.tune.plugins.module_utils.knobs.{layer}")


def _override_spec(layer: str, key: str, schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type", "string")
    kind = next(k for k in kind if k != "null") if isinstance(kind, list) else kind
    spec: dict[str, Any] = {"type": JSON_TYPES[kind]}
    if kind == "array":
        spec["elements"] = JSON_TYPES[schema["items"].get("type", "string")]
    if "default" in schema:
        spec["default"] = schema["default"]
    text = schema["description"].rstrip(".")
    spec["description"] = f"{text}. Defaults to the profile's C({layer}.{key})."
    return spec


def _setting_spec(setting: Setting) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": setting.spec_type}
    if spec["type"] == "list":
        spec["elements"] = "str"
    if setting.default is not None:
        spec["default"] = setting.default
    if setting.choices:
        spec["choices"] = list(setting.choices)
    spec["description"] = setting.description
    return spec


def _knob_options(knobs: tuple[Knob, ...]) -> dict[str, dict[str, Any]]:
    options: dict[str, dict[str, Any]] = {}
    for knob in knobs:
        options[knob.switch] = {"type": "bool", "default": True,
                                "description": f"Run the C({knob.name}) knob ({knob.summary})."}
    for knob in knobs:
        for var, key in knob.overrides.items():
            options.setdefault(var, _override_spec(knob.layer, key, knob.profile_keys[key]))
    for knob in knobs:
        for setting in knob.settings:
            spec = _setting_spec(setting)
            if options.setdefault(setting.name, spec) != spec:
                raise ValueError(f"setting {setting.name} is declared twice, differently")
    return options


def _common(layer: str) -> dict[str, dict[str, Any]]:
    return {
        "exemplar_sysroot": {"type": "path", "default": "/", "description": "Directory "
                             "mirroring C(/) to change instead of the live host."},
        "exemplar_profile": {"type": "dict", "default": {}, "description": "The exemplar-tune "
                             f"profile; its C({layer}) section feeds the knobs' targets."},
    }


def argument_specs(layer: str) -> str:
    """The role ``layer``'s ``meta/argument_specs.yml``."""
    module = _layer_module(layer)
    knobs = get_layer(layer).knobs
    bmc = BMC_OPTIONS if "bmc" in get_layer(layer).options else {}
    main = {
        "short_description": module.ROLE_SUMMARY,
        "description": [*getattr(module, "ROLE_NOTES", ()),
                        *(knob.doc or f"C({knob.name}) - {knob.summary}." for knob in knobs)],
        "options": {
            "exemplar_run_id": {"type": "str", "description": "Run id naming the host journal; "
                                "required unless in check mode."},
            **_common(layer), **_knob_options(knobs), **getattr(module, "ROLE_OPTIONS", {}),
            **bmc,
        },
    }
    restore = {
        "short_description": f"Put back what a run changed on the {layer} layer",
        "options": {
            "exemplar_run_id": {"type": "str", "required": True,
                                "description": "The run to restore."},
            "exemplar_restore_expected": {
                "type": "list", "elements": "str", "default": [],
                "description": "Hosts known to have changed in this run (the ledger saw them); "
                               "on these a missing journal fails the restore instead of "
                               "counting as nothing to put back."},
            "exemplar_sysroot": {"type": "path", "default": "/",
                                 "description": "Directory mirroring C(/) of the host."},
            **bmc,
        },
    }
    body = yaml.dump({"argument_specs": {"main": main, "restore": restore}}, Dumper=_Dumper,
                     sort_keys=False, width=100, allow_unicode=True)
    return f"---\n{HEADER}{body}"


def declared_keys() -> dict[tuple[str, str], tuple[dict[str, Any], str]]:
    """Every profile key a declaration owns, ``(layer, key)``, with its JSON schema and the
    declaration that owns it: each knob's ``profile_keys``, each declared check's key."""
    found: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
    owners = [(knob.layer, key, spec, f"knob {knob.id}")
              for knob in registered_knobs().values() for key, spec in knob.profile_keys.items()]
    owners += [(c.layer, c.declaration.key, c.declaration.schema, f"check {c.id}")
               for c in CHECKS if c.declaration is not None and c.declaration.schema]
    for layer, key, spec, owner in owners:
        if found.setdefault((layer, key), (spec, owner))[0] != spec:
            raise ValueError(f"profile key {layer}.{key} is declared differently by "
                             f"{found[(layer, key)][1]} and {owner}")
    return found


def profile_schema(base: dict[str, Any]) -> str:
    """``schema.json``, whole: ``schema-base.json`` (the keys no declaration owns) with every
    declared key added, so that a key whose declaration is gone is gone from the schema."""
    schema = json.loads(json.dumps(base))
    schema["$comment"] = (f"Generated from {SCHEMA_BASE.name} and the knob and check "
                          "declarations by python -m exemplar_tune.registry_docs: edit those, "
                          "not this file.")
    for (layer, key), (spec, owner) in declared_keys().items():
        keys = schema["properties"][layer]["properties"]
        if key in keys:
            raise ValueError(f"profile key {layer}.{key} is owned by {owner}: remove it from "
                             f"{SCHEMA_BASE.name}")
        keys[key] = spec
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def knob_table() -> str:
    """The README's table of knobs."""
    rows = ["| knob | family | profile keys | check | reboot | what it does |",
            "|---|---|---|---|---|---|"]
    for knob in registered_knobs().values():
        keys = ", ".join(f"`{knob.layer}.{key}`" for key in knob.profile_keys)
        family = type(knob.state).__name__.lower() if knob.state else "planner"
        check = f"`{knob.check_id}`" if knob.check else ""
        rows.append(f"| `{knob.id}` | {family} | {keys} | {check} | "
                    f"{'yes' if knob.reboot else 'no'} | {knob.summary} |")
    return "\n".join(rows) + "\n"


def check_table() -> str:
    """The README's table of checks, in preflight order."""
    rows = ["| check | severity | class | fixed by | actions when it fails | what it checks | "
            "declared as |", "|---|---|---|---|---|---|---|"]
    order = {name: index for index, name in enumerate(ROLE_LAYERS + ("workload",))}
    for item in sorted(CHECKS, key=lambda c: order.get(c.layer, len(order))):
        knob = f"`{item.knob}`" if item.knob else "(manual)"
        kind = "health" if item.health else "tuning"
        rows.append(f"| `{item.id}` | {item.severity} | {kind} | {knob} | "
                    f"{', '.join(item.actions)} | {item.title} | {_declared_as(item)} |")
    return "\n".join(rows) + "\n"


def _declared_as(item: Any) -> str:
    """How a check is defined: a comparison, its knob's family, or hand code and why."""
    if item.declaration is not None:
        return f"comparison ({item.declaration.compare.replace('_', ' ')})"
    if item.hand:
        return f"hand code: {item.hand}"
    return "its knob's family"


def diagnose_table() -> str:
    """The README's table of the formats ``diagnose`` recognises, in the order it tries them:
    each format's name and the first paragraph of its module's docstring."""
    from exemplar_tune.diagnose import ANALYZERS

    rows = ["| format | read by | what it reads and judges |", "|---|---|---|"]
    for analyzer in ANALYZERS:
        module = sys.modules[analyzer.analyze.__module__]
        summary = " ".join((module.__doc__ or "").split("\n\n")[0].split())
        summary = summary.replace("``", "`").replace(":mod:", "").replace("|", "\\|")
        rows.append(f"| {analyzer.label or analyzer.kind} | `{module.__name__}` | {summary} |")
    return "\n".join(rows) + "\n"


def _sos_output(out: SosOutput) -> str:
    since = f", sos {'.'.join(map(str, out.since))} and later" if out.since else ""
    unit = f", the `Id={out.unit}` block" if out.unit else ""
    return f"`{out.path}` (`{out.command}`{unit}{since})"


def sos_table() -> str:
    """The README's table: for each command file, the sos report output read in its place."""
    rows = ["| command file | sos report output read | collected, not read |", "|---|---|---|"]
    for name, argv in COMMANDS.items():
        if name in MAPPED:
            read = "; ".join(_sos_output(out) for out in MAPPED[name])
        else:
            instead = f" (`{NEVER[name].instead}` is read)" if NEVER[name].instead else ""
            read = f"none: {NEVER[name].why}{instead}"
        unread = "; ".join(f"{_sos_output(u.output)}: {u.why}" for u in UNREAD.get(name, ()))
        rows.append(f"| `{name}` (`{' '.join(argv)}`) | {read} | {unread} |")
    return "\n".join(rows) + "\n"


def unexpressed_table() -> str:
    """The README's table of the settings the shipped translations of vendor profiles cannot
    express (each profile's own ``unexpressed`` entries, not its parents')."""
    from exemplar_tune.profile import PROFILES_DIR, shipped_profiles

    rows = ["| profile | setting | where | why not |", "|---|---|---|---|"]
    for name in shipped_profiles():
        own = yaml.safe_load((PROFILES_DIR / f"{name}.yaml").read_text())
        rows += [f"| `{name}` | `{u['setting']}` | {u['source']} | {' '.join(u['why'].split())} |"
                 for u in own.get("unexpressed", [])]
    return "\n".join(rows) + "\n"


def _replace_block(text: str, name: str, body: str) -> str:
    start, end = f"<!-- generated: {name} -->\n", f"<!-- end: {name} -->"
    if start not in text or end not in text:
        raise ValueError(f"README.md has no {start.strip()} ... {end} block")
    head, rest = text.split(start, 1)
    return head + start + body + end + rest.split(end, 1)[1]


VARIABLE_NAMES = REPO / "plugins" / "plugin_utils" / "knob_variable_names.py"


def variable_names() -> str:
    """``plugin_utils/knob_variable_names.py``: each layer's knob variables, as data.

    The ``exemplar.tune.knob_variables`` lookup runs in every host's Ansible worker, where
    importing the registry itself would compile it from source again for each host.
    """
    lines = []
    for layer in ROLE_LAYERS:
        names = dict.fromkeys(v for knob in get_layer(layer).knobs
                              for v in (*knob.variables(), *knob.former))
        lines += [f'    "{layer}": (', *(f'        "{name}",' for name in names), "    ),"]
    body = "\n".join(lines)
    return ('"""Each layer\'s knob variables. Generated from the knob registry by\n'
            '``python -m exemplar_tune.registry_docs``: edit the knobs, not this file."""\n\n'
            f"LAYER_VARIABLES = {{\n{body}\n}}\n")


NPD_CONFIG = REPO / "deploy" / "kubernetes" / "node-problem-detector-config.yaml"


def npd_config_map() -> str:
    """``deploy/kubernetes/node-problem-detector-config.yaml``: the ConfigMap that holds
    node-problem-detector's plugin configuration, one condition per layer."""
    doc = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "exemplar-tune-npd", "namespace": "kube-system",
                        "labels": {"app.kubernetes.io/name": "exemplar-tune-npd"}},
           "data": {"exemplar-tune.json": plugin_config_text()}}
    header = ("# Generated from the layer and check registries by\n"
              "# `python -m exemplar_tune.registry_docs`: edit exemplar_tune/reports/npd.py, "
              "not this file.\n")
    return header + yaml.dump(doc, Dumper=_BlockDumper, sort_keys=False, width=100)


class _BlockDumper(_Dumper):
    """Multi-line strings (an embedded file) as literal blocks."""


_BlockDumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def generated() -> dict[Path, str]:
    """Every generated file's path and its content from the registries."""
    files = {REPO / "roles" / layer / "meta" / "argument_specs.yml": argument_specs(layer)
             for layer in ROLE_LAYERS}
    files[VARIABLE_NAMES] = variable_names()
    files[NPD_CONFIG] = npd_config_map()
    files[SCHEMA] = profile_schema(json.loads(SCHEMA_BASE.read_text()))
    readme = README.read_text()
    readme = _replace_block(readme, "knobs", knob_table())
    readme = _replace_block(readme, "checks", check_table())
    readme = _replace_block(readme, "diagnose", diagnose_table())
    readme = _replace_block(readme, "unexpressed", unexpressed_table())
    files[README] = _replace_block(readme, "sos", sos_table())
    return files


def stale() -> list[Path]:
    """The generated files whose committed content differs from the registries'."""
    return [path for path, text in generated().items()
            if not path.exists() or path.read_text() != text]


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main(argv: list[str] | None = None) -> int:
    """Write the generated files (or, with ``--check``, name the stale ones and exit 1)."""
    parser = argparse.ArgumentParser(
        prog="python -m exemplar_tune.registry_docs",
        description="Regenerate the role argument specs, the profile schema and "
                    "the README's generated tables from the registries and profiles.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and name the files that are stale")
    args = parser.parse_args(argv)
    if args.check:
        found = stale()
        for path in found:
            print(f"stale: {_shown(path)} (run python -m exemplar_tune.registry_docs)",
                  file=sys.stderr)
        return 1 if found else 0
    for path, text in generated().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {_shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
