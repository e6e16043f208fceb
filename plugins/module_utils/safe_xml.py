"""Parsing untrusted XML (nvidia-smi output, NCCL topology files) safely.

Uses ``defusedxml`` when it is installed (always on the controller). Managed hosts may lack
it, so the fallback refuses any document that declares an entity (internal or external):
the constructs behind "billion laughs" and XXE. A DOCTYPE that
only names an external DTD (``<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">``) is
accepted; the DTD is never fetched.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET  # noqa: S405 - guarded below

from ansible_collections.exemplar.tune.plugins.module_utils.errors import ParseError

try:  # pragma: no cover - which branch runs depends on the host
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import fromstring as _defused_fromstring
except ImportError:  # pragma: no cover
    DefusedXmlException = None
    _defused_fromstring = None

MAX_XML = 16 * 1024 * 1024


def parse_xml(text: str, source: str) -> ET.Element:
    """Root element of ``text``; ``ParseError(source, ...)`` when unsafe or malformed."""
    if len(text) > MAX_XML:
        raise ParseError(source, text[:40], f"XML larger than {MAX_XML} bytes")
    if _defused_fromstring is not None:
        return _parse_defused(text, source)
    return _parse_guarded(text, source)


def _parse_defused(text: str, source: str) -> ET.Element:
    try:
        return _defused_fromstring(text, forbid_dtd=False, forbid_entities=True,
                                   forbid_external=True)
    except DefusedXmlException as exc:
        raise ParseError(source, text, f"unsafe XML refused ({type(exc).__name__})") from None
    except ET.ParseError as exc:
        raise ParseError(source, text, f"malformed XML ({exc})") from None


def _parse_guarded(text: str, source: str) -> ET.Element:
    # Entities (internal or external) can only come from an <!ENTITY declaration.
    if "<!ENTITY" in text:
        raise ParseError(source, text, "unsafe XML refused (entity declaration)")
    try:
        return ET.fromstring(text)  # noqa: S314 - entity declarations refused above
    except ET.ParseError as exc:
        raise ParseError(source, text, f"malformed XML ({exc})") from None
