"""cpu-layer BIOS facts: C-state, C1E, turbo and profile settings read from the BMC (Redfish).

Key added to the cpu layer's sheet: ``bios``. Where it comes from, in order:

* a BMC (the facts modules' ``bmc`` option): read live over Redfish from where the module
  runs (the node for remote hosts, the controller for local-connection hosts);
* inside a sysroot, ``.exemplar/commands/redfish-bios.json`` when it exists (the Redfish
  documents ``ServiceRoot``, ``System``, ``Bios`` and ``BiosSettings`` of one host);
* otherwise ``{"present": false, "reason": "no BMC configured"}``.

A BMC that cannot be read (refused login, unreachable, untrusted certificate) gives
``bios: null`` plus an entry in the sheet's ``errors`` that says why, in one line.

The Redfish and BIOS-attribute readers are imported when there is something to read: a host
without a BMC or a capture does not load them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import (
    BmcConfig,
    RedfishError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import COMMANDS_DIR, Sysroot

if TYPE_CHECKING:
    from ansible_collections.exemplar.tune.plugins.module_utils.readers.bios import BiosSnapshot

CAPTURE = f"{COMMANDS_DIR}/redfish-bios.json"
NOT_CONFIGURED = {"present": False, "reason": "no BMC configured"}


def bios_facts(snapshot: BiosSnapshot) -> dict[str, Any]:
    """The normalised ``bios`` fact of one snapshot (raw attributes for an unknown vendor)."""
    from ansible_collections.exemplar.tune.plugins.module_utils.readers import bios_attributes
    from ansible_collections.exemplar.tune.plugins.module_utils.readers.bios import snapshot_vendor

    current = snapshot.current
    vendor, how = snapshot_vendor(snapshot)
    facts: dict[str, Any] = {
        "present": True, "vendor": vendor, "vendor_known": vendor != bios_attributes.UNKNOWN,
        "vendor_source": how, "manufacturer": snapshot.system.get("Manufacturer"),
        "model": snapshot.system.get("Model"), "system": snapshot.system_uri,
        "attribute_registry": snapshot.bios.get("AttributeRegistry"),
        "apply_times": snapshot.apply_times, "reset_types": snapshot.reset_types,
        "pending_raw": snapshot.pending,
    }
    if vendor == bios_attributes.UNKNOWN:
        return {**facts, **dict.fromkeys(bios_attributes.FIELDS), "attributes": {},
                "pending": {}, "raw": current}
    vmap = bios_attributes.VENDORS[vendor]
    now = bios_attributes.normalise(vmap, current)
    after = bios_attributes.normalise(vmap, snapshot.effective)
    pending = {f: after[f] for f in bios_attributes.FIELDS if after[f] != now[f]}
    raw = {name: current[name] for name in now["attributes"].values()}
    return {**facts, **now, "pending": pending, "raw": raw}


def _capture(root: Sysroot) -> BiosSnapshot | None:
    """The captured Redfish documents inside a sysroot, or ``None`` when there are none."""
    if root.live:
        return None
    text = root.read_optional(CAPTURE)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        raise ParseError(root.display(CAPTURE), text, "not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("Bios"), dict):
        raise ParseError(root.display(CAPTURE), text, "no Bios document")
    from ansible_collections.exemplar.tune.plugins.module_utils.readers.bios import (
        snapshot_from_capture,
    )

    return snapshot_from_capture(doc, root.display(CAPTURE))


def _read_live(bmc: BmcConfig) -> dict[str, Any]:
    from ansible_collections.exemplar.tune.plugins.module_utils.readers.bios import read_snapshot
    from ansible_collections.exemplar.tune.plugins.module_utils.readers.redfish import RedfishClient

    return bios_facts(read_snapshot(RedfishClient(bmc)))


def _read_capture(root: Sysroot) -> dict[str, Any]:
    snapshot = _capture(root)
    return NOT_CONFIGURED if snapshot is None else bios_facts(snapshot)


def _source(bmc: BmcConfig) -> str:
    try:
        return f"{bmc.base_url}/redfish/v1 (Redfish)"
    except RedfishError:
        return "BMC (address not understood)"


def gather_into(sheet: FactSheet, root: Sysroot, bmc: BmcConfig | None = None) -> None:
    """Add the ``bios`` fact to ``sheet`` (live BMC, captured file, or not present)."""
    if bmc is not None:
        sheet.attempt("bios", _source(bmc), _read_live, bmc)
    else:
        sheet.attempt("bios", root.display(CAPTURE), _read_capture, root)
