"""A small Redfish client: JSON over HTTPS with basic authentication, standard library only.

The BMC is named by an address (``host``, ``host:port`` or an ``https://`` URL); TLS
certificates are verified by default, against the system trust store or a pinned CA bundle
(``ca``), and verification can only be switched off explicitly (``validate_certs=False``).
Every failure is a :class:`RedfishError` whose message is one line, names the BMC and says
what to do; the password never appears in a message, a repr or an exception.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import (
    BmcAuthError,
    BmcConfig,
    BmcTlsError,
    BmcUnreachable,
    RedfishError,
)

MAX_BODY = 16 * 1024 * 1024


def tls_context(bmc: BmcConfig) -> ssl.SSLContext:
    """Verifying TLS context (system store, or only ``bmc.ca``); unverified only on request."""
    if not bmc.validate_certs:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cafile=bmc.ca) if bmc.ca else \
            ssl.create_default_context()
    except (OSError, ssl.SSLError) as exc:
        raise BmcTlsError(bmc.base_url, f"cannot load CA bundle {bmc.ca}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: urllib would send the credentials along to wherever they point."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201
        return None


class RedfishClient:
    """GET/PATCH/POST JSON on one BMC; paths are ``/redfish/v1/...`` URIs from its links.

    Redirects are refused (an HTTP 3xx is an error): the credentials never leave this BMC.
    """

    def __init__(self, bmc: BmcConfig) -> None:
        self.bmc = bmc
        self.base = bmc.base_url
        self._context = tls_context(bmc) if self.base.startswith("https:") else None
        token = base64.b64encode(f"{bmc.user}:{bmc.password}".encode()).decode()
        self._headers = {"Authorization": f"Basic {token}", "Accept": "application/json",
                         "OData-Version": "4.0"}
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=self._context), _NoRedirect())

    def __repr__(self) -> str:
        return f"RedfishClient({self.base!r})"

    def get(self, uri: str) -> dict[str, Any]:
        """The JSON object at ``uri``."""
        return self._request("GET", uri) or {}

    def patch(self, uri: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """PATCH ``body``; returns the response object, if the BMC sent one."""
        return self._request("PATCH", uri, body)

    def post(self, uri: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """POST ``body`` (an action); returns the response object, if any."""
        return self._request("POST", uri, body)

    def _request(self, method: str, uri: str, body: dict[str, Any] | None = None
                 ) -> dict[str, Any] | None:
        url = self.base + "/" + uri.lstrip("/")
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers, **({"Content-Type": "application/json"} if data else {}))
        # the scheme is https or http (checked in BmcConfig.base_url), never file: or custom
        request = urllib.request.Request(url, data=data, headers=headers,  # noqa: S310
                                         method=method)
        try:
            with self._opener.open(request, timeout=self.bmc.timeout) as response:
                return _json(self.base, uri, response.read(MAX_BODY + 1))
        except urllib.error.HTTPError as exc:
            raise self._http_error(method, uri, exc) from None
        except (urllib.error.URLError, OSError) as exc:
            raise self._connection_error(exc) from None
        except (http.client.HTTPException, ValueError) as exc:  # bad address, cut-off reply
            raise RedfishError(self.base, f"{method} {uri}: {type(exc).__name__}: "
                               f"{str(exc)[:200]}") from None

    def _http_error(self, method: str, uri: str, exc: urllib.error.HTTPError) -> RedfishError:
        if exc.code in (401, 403):
            return BmcAuthError(self.base, f"authentication failed (HTTP {exc.code}) for user "
                                f"{self.bmc.user!r}: check exemplar_bmc_user and "
                                "exemplar_bmc_password (or EXEMPLAR_BMC_PASSWORD)")
        return RedfishError(self.base, f"{method} {uri}: HTTP {exc.code} "
                            f"{_redfish_message(exc) or exc.reason}")

    def _connection_error(self, exc: BaseException) -> RedfishError:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, ssl.SSLCertVerificationError):
            return BmcTlsError(self.base, f"TLS certificate not trusted ({reason.verify_message}):"
                               " pin the BMC's CA with exemplar_bmc_ca=/path/ca.pem (or set "
                               "exemplar_bmc_validate_certs=false)")
        if isinstance(reason, ssl.SSLError):
            return BmcTlsError(self.base, f"TLS failed: {reason.reason or reason}")
        if isinstance(reason, (TimeoutError, socket.timeout)):
            return BmcUnreachable(self.base, f"cannot connect: no answer in {self.bmc.timeout} s")
        text = getattr(reason, "strerror", None) or str(reason)
        return BmcUnreachable(self.base, f"cannot connect: {text}")


def _json(base: str, uri: str, raw: bytes) -> dict[str, Any] | None:
    """A Redfish response body as an object (``None`` for an empty body)."""
    if len(raw) > MAX_BODY:
        raise RedfishError(base, f"{uri}: response larger than {MAX_BODY} bytes")
    if not raw.strip():
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        raise RedfishError(base, f"{uri}: response is not JSON") from None
    except RecursionError:
        raise RedfishError(base, f"{uri}: response is JSON nested deeper than Python reads") \
            from None
    if not isinstance(doc, dict):
        raise RedfishError(base, f"{uri}: response is not a JSON object")
    return doc


def _redfish_message(exc: urllib.error.HTTPError) -> str:
    """The first message of a Redfish error body (``error.@Message.ExtendedInfo``)."""
    try:
        doc = json.loads(exc.read(64 * 1024) or b"{}")
    except (ValueError, OSError, RecursionError):
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict):
        return ""
    infos = error.get("@Message.ExtendedInfo") or []
    first = infos[0] if infos and isinstance(infos[0], dict) else {}
    return " ".join(str(first.get("Message") or error.get("message") or "").split())
