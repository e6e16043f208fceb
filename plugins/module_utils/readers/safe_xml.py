"""Parsing untrusted XML (nvidia-smi output, NCCL topology files) safely.

Uses ``defusedxml`` when it is installed (always on the controller). Managed hosts may lack
it, so the fallback refuses any document that declares an entity (internal or external):
the constructs behind "billion laughs" and XXE. A DOCTYPE that
only names an external DTD (``<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">``) is
accepted; the DTD is never fetched.

The XML libraries are imported by the first parse, not with this module: a host with no
``nvidia-smi`` and no topology file does not load them (facts are gathered on every host of a
fleet at every run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError

if TYPE_CHECKING:
    from xml.etree.ElementTree import Element

MAX_XML = 16 * 1024 * 1024


def parse_xml(text: str, source: str) -> Element:
    """Root element of ``text``; ``ParseError(source, ...)`` when unsafe or malformed."""
    if len(text) > MAX_XML:
        raise ParseError(source, text[:40], f"XML larger than {MAX_XML} bytes")
    try:
        from defusedxml import DefusedXmlException
        from defusedxml.ElementTree import fromstring
    except ImportError:  # a managed host without defusedxml
        return _parse_guarded(text, source)
    from xml.etree.ElementTree import ParseError as Malformed  # noqa: S405 - not a parser

    try:
        return fromstring(text, forbid_dtd=False, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as exc:
        raise ParseError(source, text, f"unsafe XML refused ({type(exc).__name__})") from None
    except Malformed as exc:
        raise ParseError(source, text, f"malformed XML ({exc})") from None


def _parse_guarded(text: str, source: str) -> Element:
    import xml.etree.ElementTree as ET  # noqa: N817, S405 - entity declarations refused below

    # Entities (internal or external) can only come from an <!ENTITY declaration.
    if "<!ENTITY" in text:
        raise ParseError(source, text, "unsafe XML refused (entity declaration)")
    try:
        return ET.fromstring(text)  # noqa: S314 - entity declarations refused above
    except ET.ParseError as exc:
        raise ParseError(source, text, f"malformed XML ({exc})") from None
