"""BIOS attributes of a host behind its BMC, over Redfish: read, stage for the next boot, reset.

The resources are found by following links, never by guessing vendor paths: the service
root's ``Systems`` collection → the first ``ComputerSystem`` → its ``Bios`` → the
``@Redfish.Settings`` ``SettingsObject`` where pending values are read and written
(``Bios/Settings`` on Dell, ``Bios/Pending`` on Lenovo, ``Bios/SD`` on Supermicro). Current
values are ``Attributes`` of ``Bios``; pending ones are the settings object's ``Attributes``
that differ from them (some BMCs list only the changed ones, others a full copy). A change is
staged with ``PATCH`` on the settings object, with ``@Redfish.SettingsApplyTime`` ``OnReset``
where the service lists it in ``SupportedApplyTimes``, and takes effect at the next reset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers import bios_attributes
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import (
    BmcConfig,
    RedfishError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError

if TYPE_CHECKING:
    from ansible_collections.exemplar.tune.plugins.module_utils.readers.redfish import RedfishClient

SERVICE_ROOT = "/redfish/v1/"
RESET_ACTION = "#ComputerSystem.Reset"
# Reset types that reboot a running host, in order of preference.
RESTART_TYPES = ("GracefulRestart", "ForceRestart", "PowerCycle")


@dataclass(frozen=True)
class BiosSnapshot:
    """What the BMC says about one system's BIOS at one moment (plain JSON documents)."""

    base: str
    service_root: dict[str, Any]
    system_uri: str
    system: dict[str, Any]
    bios_uri: str
    bios: dict[str, Any]
    settings_uri: str | None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def current(self) -> dict[str, Any]:
        """The attribute values the BIOS runs with now."""
        return dict(self.bios.get("Attributes") or {})

    @property
    def pending(self) -> dict[str, Any]:
        """Values staged for the next boot that differ from the current ones."""
        current = self.current
        staged = self.settings.get("Attributes") or {}
        return {k: v for k, v in staged.items() if current.get(k, object()) != v}

    @property
    def effective(self) -> dict[str, Any]:
        """What the BIOS will run with after the next reset (pending over current)."""
        return {**self.current, **self.pending}

    @property
    def apply_times(self) -> list[str]:
        """``SupportedApplyTimes`` of the settings object (empty when not advertised)."""
        return list((self.bios.get("@Redfish.Settings") or {}).get("SupportedApplyTimes") or [])

    @property
    def reset_target(self) -> str | None:
        """URI of the system's ``ComputerSystem.Reset`` action."""
        return ((self.system.get("Actions") or {}).get(RESET_ACTION) or {}).get("target")

    @property
    def reset_types(self) -> list[str]:
        """Reset types the system accepts, as it advertises them inline."""
        action = (self.system.get("Actions") or {}).get(RESET_ACTION) or {}
        return list(action.get("ResetType@Redfish.AllowableValues") or [])


def snapshot_vendor(snapshot: BiosSnapshot) -> tuple[str, str]:
    """``(vendor, how it was recognised)`` of a snapshot (see ``bios_attributes``)."""
    return bios_attributes.detect_vendor(
        snapshot.system.get("Manufacturer"), snapshot.service_root.get("Vendor"),
        list(snapshot.service_root.get("Oem") or {}), snapshot.current)


def _link(doc: dict[str, Any], key: str, where: str, base: str) -> str:
    uri = (doc.get(key) or {}).get("@odata.id") if isinstance(doc.get(key), dict) else None
    if not uri:
        raise RedfishError(base, f"{where} has no {key} link")
    return str(uri)


def read_snapshot(client: RedfishClient) -> BiosSnapshot:
    """Follow the links from the service root to the BIOS and its pending settings."""
    root = client.get(SERVICE_ROOT)
    systems = client.get(_link(root, "Systems", SERVICE_ROOT, client.base))
    members = systems.get("Members") or []
    if not members or not isinstance(members[0], dict) or "@odata.id" not in members[0]:
        raise RedfishError(client.base, "the Systems collection is empty")
    system_uri = str(members[0]["@odata.id"])
    system = client.get(system_uri)
    bios_uri = _link(system, "Bios", system_uri, client.base)
    bios = client.get(bios_uri)
    settings_uri = ((bios.get("@Redfish.Settings") or {}).get("SettingsObject") or {}).get(
        "@odata.id")
    settings = client.get(settings_uri) if settings_uri else {}
    return BiosSnapshot(client.base, root, system_uri, system, bios_uri, bios, settings_uri,
                        settings)


def snapshot_from_capture(doc: dict[str, Any], source: str) -> BiosSnapshot:
    """A snapshot from a captured file: ``{ServiceRoot, System, Bios, BiosSettings}``."""
    system, bios = doc.get("System") or {}, doc.get("Bios") or {}
    settings_uri = ((bios.get("@Redfish.Settings") or {}).get("SettingsObject") or {}).get(
        "@odata.id")
    return BiosSnapshot(source, doc.get("ServiceRoot") or {}, system.get("@odata.id", ""),
                        system, bios.get("@odata.id", ""), bios, settings_uri,
                        doc.get("BiosSettings") or {})


class BiosSettings:
    """The writable side of one BMC's BIOS: effective values, staging, the journal's labels."""

    def __init__(self, bmc: BmcConfig, apply_time: str | None = "OnReset") -> None:
        from ansible_collections.exemplar.tune.plugins.module_utils.readers.redfish import (
            RedfishClient,
        )

        self.client = RedfishClient(bmc)
        self.apply_time = apply_time
        self.snapshot = read_snapshot(self.client)
        if not self.snapshot.settings_uri:
            raise RedfishError(self.client.base, f"{self.snapshot.bios_uri} has no "
                               "@Redfish.Settings object: this BMC cannot stage BIOS changes")

    @property
    def bmc_url(self) -> str:
        """``https://bmc[:port]``: the BMC, without credentials (kept in the journal)."""
        return self.client.base

    @property
    def system(self) -> str:
        """URI of the ``ComputerSystem`` whose BIOS this is."""
        return self.snapshot.system_uri

    @property
    def label(self) -> str:
        """``https://bmc/redfish/v1/Systems/<id>/Bios/Settings``: where changes are written."""
        return f"{self.client.base}{self.snapshot.settings_uri}"

    def effective(self, names: list[str]) -> dict[str, Any]:
        """The values ``names`` will have after the next reset (re-read from the BMC)."""
        self.snapshot = read_snapshot(self.client)
        effective = self.snapshot.effective
        return {name: effective.get(name) for name in names}

    def stage(self, desired: dict[str, Any]) -> None:
        """PATCH the attributes whose next-boot value differs from ``desired`` (without those a
        preset profile sets itself, see ``bios_attributes.unlocked``)."""
        effective = self.effective(list(desired))
        changed = {k: v for k, v in desired.items() if effective.get(k) != v}
        vmap = bios_attributes.VENDORS.get(snapshot_vendor(self.snapshot)[0])
        if vmap is not None:
            changed = bios_attributes.unlocked(vmap, self.snapshot.effective, changed)
        if not changed:
            return
        body: dict[str, Any] = {"Attributes": changed}
        if self.apply_time and self.apply_time in self.snapshot.apply_times:
            body["@Redfish.SettingsApplyTime"] = {"ApplyTime": self.apply_time}
        self.client.patch(str(self.snapshot.settings_uri), body)


def reset_types(client: RedfishClient, snapshot: BiosSnapshot) -> list[str]:
    """Allowed reset types: inline, else from the action's ``@Redfish.ActionInfo``."""
    if snapshot.reset_types:
        return snapshot.reset_types
    action = (snapshot.system.get("Actions") or {}).get(RESET_ACTION) or {}
    if not action.get("@Redfish.ActionInfo"):
        return []
    info = client.get(str(action["@Redfish.ActionInfo"]))
    for parameter in info.get("Parameters") or []:
        if isinstance(parameter, dict) and parameter.get("Name") == "ResetType":
            return list(parameter.get("AllowableValues") or [])
    return []


def choose_reset_type(snapshot: BiosSnapshot, allowed: list[str], wanted: str = "auto") -> str:
    """The reset type to reboot with: ``wanted`` if allowed, else the first allowed restart
    (``On`` for a powered-off system); an empty ``allowed`` means "not advertised"."""
    if wanted != "auto":
        if allowed and wanted not in allowed:
            raise RedfishError(snapshot.base, f"reset type {wanted} not allowed; the system "
                               f"accepts {', '.join(allowed)}")
        return wanted
    if snapshot.system.get("PowerState") == "Off" and (not allowed or "On" in allowed):
        return "On"
    for reset_type in RESTART_TYPES:
        if not allowed or reset_type in allowed:
            return reset_type
    raise RedfishError(snapshot.base, "the system allows no restart (reset types: "
                       f"{', '.join(allowed)})")


def reset_system(client: RedfishClient, wanted: str = "auto") -> dict[str, Any]:
    """POST ``ComputerSystem.Reset``; returns ``{system, reset_type}``."""
    snapshot = read_snapshot(client)
    if not snapshot.reset_target:
        raise RedfishError(client.base, f"{snapshot.system_uri} has no {RESET_ACTION} action")
    reset_type = choose_reset_type(snapshot, reset_types(client, snapshot), wanted)
    client.post(snapshot.reset_target, {"ResetType": reset_type})
    return {"system": snapshot.system_uri, "reset_type": reset_type}


def bmc_connector(bmc: BmcConfig | None):
    """Opens the BMC a Redfish journal entry names, with ``bmc``'s credentials (or ``None``).

    The journal lives on the host: an entry naming another BMC than the inventory's is refused,
    so the credentials only ever go to the configured BMC.
    """
    def connect(entry: dict[str, Any]) -> BiosSettings | None:
        if bmc is None:
            return None
        if bmc.with_address(entry["bmc"]).base_url != bmc.base_url:
            raise HostStateError(entry["path"], f"the journal names BMC {entry['bmc']}, the "
                                 f"inventory {bmc.base_url}: not restored (credentials are "
                                 "only sent to the inventory's BMC)")
        settings = BiosSettings(bmc)
        if settings.system != entry["system"]:
            raise HostStateError(entry["path"], f"the BMC now shows system {settings.system}, "
                                 f"the journal recorded {entry['system']}: not restored")
        return settings

    return connect
