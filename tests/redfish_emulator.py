"""A real Redfish service for the tests: the sushy-tools emulator with a BIOS-keeping driver.

sushy-tools ships a ``fake`` systems driver that keeps no BIOS attributes (``get_bios`` is not
implemented) and serves ``BIOS`` and ``BIOS/Settings`` from the same call, so pending values
cannot differ from current ones. This module adds what a BMC does and the tests need:

* :class:`BiosDriver` - a systems driver written against sushy-tools' documented interface
  (``AbstractSystemsDriver``): one system, its BIOS attributes, pending values staged by
  ``PATCH`` and applied by a restart (``ComputerSystem.Reset``), optionally Dell-like locks
  (attributes read-only unless ``SysProfile`` is ``Custom``). Its whole state is also written
  to a JSON file after every change, so a test can prove that nothing was written.
* BMC-like ``Bios`` / ``Bios/Settings`` views: ``@Redfish.Settings`` with
  ``SupportedApplyTimes``, pending-only settings (as iDRAC shows them), unknown attributes
  refused with a Redfish error.
* :class:`Emulator` - starts the service as a subprocess on a free loopback port with a
  config file, HTTPS and basic authentication (bcrypt htpasswd), waits until it answers and
  stops it (also when the test fails).

Run as a script it is the service itself: ``python tests/redfish_emulator.py --config F``.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

# Seeds. DELL: attribute names and values of a real iDRAC9 response (PowerEdge, Xeon Gold
# 6354), captured with DMTF Redfish-Mockup-Creator: github.com/cholcombe973/libredfish
# tests/mockups/dell/redfish/v1/Systems/System.Embedded.1/Bios/index.json (commit cb05ba08);
# PackageCStates as seen in an iDRAC9 PowerEdge R650 dump. A subset of the ~300 attributes.
DELL_BIOS = {
    "SysProfile": "PerfOptimized", "ProcCStates": "Disabled", "ProcC1E": "Disabled",
    "ProcTurboMode": "Enabled", "PackageCStates": "Disabled", "ProcPwrPerf": "MaxPerf",
    "MonitorMwait": "Enabled", "EnergyPerformanceBias": "MaxPower", "LogicalProc": "Enabled",
    "ProcVirtualization": "Enabled", "SubNumaCluster": "Disabled", "MemFrequency": "MaxPerf",
    "BootMode": "Uefi", "SriovGlobalEnable": "Enabled", "AcPwrRcvryUserDelay": 120,
}
# Dell: these are read-only unless SysProfile is Custom; a preset profile sets them itself at
# the next boot (values of PerfOptimized as in the capture above).
DELL_LOCKS = {"profile": "SysProfile", "custom": "Custom",
              "locked": ["ProcCStates", "ProcC1E", "ProcTurboMode", "PackageCStates"],
              "presets": {"PerfOptimized": {"ProcCStates": "Disabled", "ProcC1E": "Disabled",
                                            "ProcTurboMode": "Enabled",
                                            "PackageCStates": "Disabled"}}}
# A BIOS of no known vendor (AMI Aptio-like names, not from any vendor map).
GENERIC_BIOS = {"CpuCStates": "Enabled", "CpuTurbo": "Enabled", "PowerPolicy": "Balanced",
                "BootMode": "UEFI"}
SYSTEM_UUID = "27946b59-9e44-4fa7-8e91-f3527a1ef094"
RESTARTS = ("ForceRestart", "GracefulRestart", "PowerCycle")


# ---- the driver (runs inside the emulator process) -----------------------------------------

def _driver_class():
    from sushy_tools import error
    from sushy_tools.emulator.resources.systems.base import AbstractSystemsDriver

    class BiosDriver(AbstractSystemsDriver):
        """One system whose BIOS keeps attributes, pending values and applies them on reset."""

        @classmethod
        def initialize(cls, config, logger, *args, **kwargs):
            cls._config, cls._logger = config, logger
            return cls

        def __init__(self):
            super().__init__()
            self._lock = threading.Lock()
            self._path = Path(self._config["EXEMPLAR_STATE_FILE"])
            self._state = {"name": self._config.get("EXEMPLAR_SYSTEM_NAME", "node1"),
                           "power_state": "On",
                           "bios": copy.deepcopy(self._config["EXEMPLAR_BIOS"]),
                           "pending": {}, "patches": [], "resets": []}
            self._save()

        def _save(self):
            tmp = self._path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._state, indent=1, sort_keys=True))
            os.replace(tmp, self._path)

        def _check(self, identity):
            if identity not in (SYSTEM_UUID, self._state["name"]):
                raise error.NotFound(f"system {identity} not found")

        @property
        def driver(self):
            return "<exemplar-bios>"

        @property
        def systems(self):
            return [SYSTEM_UUID]

        def uuid(self, identity):
            self._check(identity)
            return SYSTEM_UUID

        def name(self, identity):
            self._check(identity)
            return self._state["name"]

        def get_power_state(self, identity):
            self._check(identity)
            return self._state["power_state"]

        def set_power_state(self, identity, state):
            self._check(identity)
            with self._lock:
                self._state["resets"].append(state)
                if state in RESTARTS or (state in ("On", "ForceOn")
                                         and self._state["power_state"] == "Off"):
                    self._state["bios"].update(self._state["pending"])
                    self._state["pending"] = {}
                    self._apply_preset()
                    self._state["power_state"] = "On"
                elif state in ("ForceOff", "GracefulShutdown"):
                    self._state["power_state"] = "Off"
                self._save()

        def get_boot_device(self, identity):
            return "Hdd"

        def set_boot_device(self, identity, boot_source):
            raise error.NotSupportedError("boot device is fixed in this emulator")

        def get_boot_mode(self, identity):
            return "UEFI"

        def get_nics(self, identity):
            return []

        def get_bios(self, identity):
            self._check(identity)
            return dict(self._state["bios"])

        def get_bios_pending(self, identity):
            self._check(identity)
            return dict(self._state["pending"])

        def stage_bios(self, identity, attributes, apply_time):
            """Record ``attributes`` for the next reset; a message when the BIOS refuses."""
            self._check(identity)
            with self._lock:
                refused = self._refusal(attributes)
                if refused:
                    return refused
                self._state["pending"].update(attributes)
                self._state["patches"].append({"Attributes": attributes,
                                               "ApplyTime": apply_time})
                self._save()
            return None

        def _apply_preset(self):
            locks = self._config.get("EXEMPLAR_LOCKS") or {}
            preset = (locks.get("presets") or {}).get(self._state["bios"].get(locks.get("profile")))
            self._state["bios"].update(preset or {})

        def _refusal(self, attributes):
            unknown = sorted(set(attributes) - set(self._state["bios"]))
            if unknown:
                return f"The attribute {unknown[0]} is not in the BIOS attribute registry."
            locks = self._config.get("EXEMPLAR_LOCKS")
            if not locks:
                return None
            after = {**self._state["bios"], **self._state["pending"], **attributes}
            locked = sorted(set(attributes) & set(locks["locked"]))
            if locked and after.get(locks["profile"]) != locks["custom"]:
                return (f"{locked[0]} is read-only unless {locks['profile']} is "
                        f"{locks['custom']}.")
            return None

    return BiosDriver


# ---- BMC-like BIOS views ---------------------------------------------------------------------

def _redfish_error(message):
    body = {"error": {"code": "Base.1.0.GeneralError", "message": message,
                      "@Message.ExtendedInfo": [{"MessageId": "Base.1.0.PropertyNotWritable",
                                                 "Message": message}]}}
    return json.dumps(body), 400


def _install_views(app, api_utils):
    import flask

    def wrap(func):
        return api_utils.ensure_instance_access(api_utils.returns_json(func))

    def bios(identity):
        uri = f"/redfish/v1/Systems/{identity}/BIOS"
        settings = {"@odata.type": "#Settings.v1_3_0.Settings",
                    "SettingsObject": {"@odata.id": f"{uri}/Settings"}}
        if app.config.get("EXEMPLAR_APPLY_TIMES"):
            settings["SupportedApplyTimes"] = app.config["EXEMPLAR_APPLY_TIMES"]
        return json.dumps({"@odata.id": uri, "@odata.type": "#Bios.v1_1_0.Bios", "Id": "BIOS",
                           "Name": "BIOS Configuration Current Settings",
                           "AttributeRegistry": "BiosAttributeRegistry.v1_0_3",
                           "Attributes": app.systems.get_bios(identity),
                           "@Redfish.Settings": settings})

    def bios_settings(identity):
        uri = f"/redfish/v1/Systems/{identity}/BIOS/Settings"
        if flask.request.method == "GET":
            return json.dumps({"@odata.id": uri, "@odata.type": "#Bios.v1_1_0.Bios",
                               "Id": "Settings", "Name": "BIOS Configuration Pending Settings",
                               "Attributes": app.systems.get_bios_pending(identity)})
        body = flask.request.get_json(force=True, silent=True) or {}
        attributes = body.get("Attributes")
        if not isinstance(attributes, dict) or not attributes:
            return _redfish_error("The request body has no Attributes object.")
        apply_time = (body.get("@Redfish.SettingsApplyTime") or {}).get("ApplyTime")
        refused = app.systems.stage_bios(identity, attributes, apply_time)
        return _redfish_error(refused) if refused else ("", 204)

    app.view_functions["bios"] = wrap(bios)
    app.view_functions["bios_settings"] = wrap(bios_settings)


def serve() -> int:
    """The emulator process: sushy-tools' main with the BIOS driver and views installed."""
    from sushy_tools.emulator import api_utils, main, memoize

    driver = _driver_class()

    def systems(self):
        return driver.initialize(self.config, self.logger)()

    main.Application.systems = property(memoize.memoize()(systems))
    _install_views(main.app, api_utils)
    return main.main()


# ---- the test-side handle ------------------------------------------------------------------

def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate (and key) for 127.0.0.1, made with the openssl CLI."""
    cert, key = directory / "bmc-cert.pem", directory / "bmc-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def htpasswd_line(user: str, password: str) -> str:
    """One ``user:bcrypt-digest`` line, the only format the emulator accepts."""
    import bcrypt

    return f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n"


class Emulator:
    """The Redfish service as a subprocess on 127.0.0.1 (HTTPS, basic authentication)."""

    def __init__(self, workdir: Path, tls: tuple[Path, Path], user: str, password: str,
                 bios: dict[str, Any], locks: dict[str, Any] | None = None,
                 apply_times: list[str] | None = None) -> None:
        self.workdir, self.cert = workdir, tls[0]
        self._login = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"https://{self.address}"
        self.state_file = workdir / "bmc-state.json"
        self.log = workdir / "emulator.log"
        auth = workdir / "htpasswd"
        auth.write_text(htpasswd_line(user, password))
        config = {"SUSHY_EMULATOR_LISTEN_IP": "127.0.0.1", "SUSHY_EMULATOR_LISTEN_PORT": self.port,
                  "SUSHY_EMULATOR_SSL_CERT": str(tls[0]), "SUSHY_EMULATOR_SSL_KEY": str(tls[1]),
                  "SUSHY_EMULATOR_AUTH_FILE": str(auth),
                  "SUSHY_EMULATOR_STATE_DIR": str(workdir / "sushy-state"),
                  "EXEMPLAR_STATE_FILE": str(self.state_file), "EXEMPLAR_BIOS": bios,
                  "EXEMPLAR_LOCKS": locks, "EXEMPLAR_APPLY_TIMES": apply_times or []}
        self.config_file = workdir / "emulator.conf"
        self.config_file.write_text("".join(f"{k} = {v!r}\n" for k, v in config.items()))
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> Emulator:
        """Start the service and wait until its systems answer over HTTPS (which also creates
        the driver and its state file); raise with the service's log if they do not."""
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(  # noqa: S603 - fixed argv
                [sys.executable, __file__, "--config", str(self.config_file)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        context = ssl.create_default_context(cafile=str(self.cert))
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"emulator exited: {self.log.read_text()[-2000:]}")
            request = urllib.request.Request(f"{self.url}/redfish/v1/Systems",
                                             headers={"Authorization": f"Basic {self._login}"})
            with contextlib.suppress(OSError), urllib.request.urlopen(  # noqa: S310
                    request, timeout=2, context=context) as answer:
                if answer.status == 200 and self.state_file.exists():
                    return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"emulator did not answer in {timeout} s: "
                           f"{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Stop the service (SIGTERM, then SIGKILL); safe to call twice."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def state(self) -> dict[str, Any]:
        """The emulator's whole state as its driver last wrote it."""
        return json.loads(self.state_file.read_text())

    def state_bytes(self) -> bytes:
        """The state file's exact bytes (unchanged bytes prove that nothing was written)."""
        return self.state_file.read_bytes()


if __name__ == "__main__":
    sys.exit(serve())
