"""Where a host's BMC is and how to log in: the ``bmc`` module option and its errors.

Kept apart from the Redfish client (:mod:`redfish`) so that a module run without a BMC does
not load the HTTP and TLS stack.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError

DEFAULT_TIMEOUT = 15

# The ``bmc`` option shared by every module that talks to a BMC (documented in the
# exemplar.tune.bmc doc fragment).
BMC_OPTION: dict[str, Any] = {
    "type": "dict",
    "options": {
        "address": {"type": "str"},
        "user": {"type": "str"},
        "password": {"type": "str", "no_log": True},
        "ca": {"type": "path"},
        "validate_certs": {"type": "bool", "default": True},
        "timeout": {"type": "int", "default": DEFAULT_TIMEOUT},
    },
}


class RedfishError(HostStateError):
    """The BMC could not be asked, or did not answer as Redfish says it should."""


class BmcAuthError(RedfishError):
    """The BMC refused the user name or password (HTTP 401/403)."""


class BmcUnreachable(RedfishError):
    """No connection to the BMC (refused, timed out, name not resolved)."""


class BmcTlsError(RedfishError):
    """The BMC's TLS certificate is not trusted."""


@dataclass(frozen=True)
class BmcConfig:
    """Where the BMC is and how to log in; ``password`` is never shown (``repr=False``)."""

    address: str
    user: str = ""
    password: str = field(default="", repr=False)
    ca: str | None = None
    validate_certs: bool = True
    timeout: int = DEFAULT_TIMEOUT

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> BmcConfig | None:
        """The module option ``bmc`` as a config; ``None`` when no address is given."""
        if not params or not params.get("address"):
            return None
        return cls(address=str(params["address"]), user=params.get("user") or "",
                   password=params.get("password") or "", ca=params.get("ca") or None,
                   validate_certs=params.get("validate_certs") is not False,
                   timeout=int(params.get("timeout") or DEFAULT_TIMEOUT))

    @property
    def base_url(self) -> str:
        """``scheme://host[:port]`` of the BMC (``https`` unless the address says ``http://``)."""
        text = self.address.strip().rstrip("/")
        parsed = urllib.parse.urlsplit(text if "://" in text else f"https://{text}")
        if parsed.scheme not in ("https", "http") or not parsed.hostname:
            raise RedfishError(self.address, "not a BMC address (host, host:port or https://URL)")
        if parsed.username or parsed.password:
            raise RedfishError(f"{parsed.scheme}://{parsed.hostname}", "credentials in the "
                               "address: use exemplar_bmc_user and exemplar_bmc_password")
        return f"{parsed.scheme}://{parsed.netloc}"

    def with_address(self, address: str) -> BmcConfig:
        """The same credentials and TLS settings for another address."""
        return BmcConfig(address, self.user, self.password, self.ca, self.validate_certs,
                         self.timeout)
