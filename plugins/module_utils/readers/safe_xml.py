"""Parsing untrusted XML (nvidia-smi output, NCCL topology files) safely.

Uses ``defusedxml`` when it is installed (always on the controller). Managed hosts may lack
it, so the fallback refuses any document that declares an entity (internal or external):
the constructs behind "billion laughs" and XXE. A DOCTYPE that
only names an external DTD (``<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">``) is
accepted; the DTD is never fetched.

Elements nest at most :data:`MAX_DEPTH` deep (nvidia-smi's reports nest 5 deep, NCCL's
topology files about 10): the tree builder counts the depth as elements open and refuses a
deeper document, in one line, before the tree grows any deeper. Readers walk trees with
recursion, which a deeper document would exhaust.

The XML libraries are imported by the first parse, not with this module: a host with no
``nvidia-smi`` and no topology file does not load them (facts are gathered on every host of a
fleet at every run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError

if TYPE_CHECKING:
    from xml.etree.ElementTree import Element

MAX_XML = 16 * 1024 * 1024
MAX_DEPTH = 64


class TooDeep(Exception):
    """Raised by the tree builder at an element nested deeper than :data:`MAX_DEPTH`."""


def parse_xml(text: str, source: str) -> Element:
    """Root element of ``text``; ``ParseError(source, ...)`` when unsafe, malformed or nested
    deeper than :data:`MAX_DEPTH`."""
    if len(text) > MAX_XML:
        raise ParseError(source, text[:40], f"XML larger than {MAX_XML} bytes")
    try:
        from defusedxml import DefusedXmlException
        from defusedxml.ElementTree import DefusedXMLParser
    except ImportError:  # a managed host without defusedxml
        return _parse_guarded(text, source)
    from xml.etree.ElementTree import ParseError as Malformed  # noqa: S405 - not a parser

    parser = DefusedXMLParser(target=_builder(), forbid_dtd=False, forbid_entities=True,
                              forbid_external=True)
    try:
        return _parsed(parser, text, source)
    except DefusedXmlException as exc:
        raise ParseError(source, text, f"unsafe XML refused ({type(exc).__name__})") from None
    except Malformed as exc:
        raise ParseError(source, text, f"malformed XML ({exc})") from None


def _parse_guarded(text: str, source: str) -> Element:
    import xml.etree.ElementTree as ET  # noqa: N817, S405 - entity declarations refused below

    # Entities (internal or external) can only come from an <!ENTITY declaration.
    if "<!ENTITY" in text:
        raise ParseError(source, text, "unsafe XML refused (entity declaration)")
    parser = ET.XMLParser(target=_builder())  # noqa: S314 - entity declarations refused above
    try:
        return _parsed(parser, text, source)
    except ET.ParseError as exc:
        raise ParseError(source, text, f"malformed XML ({exc})") from None


def _parsed(parser: Any, text: str, source: str) -> Element:
    """The root ``parser`` builds of ``text``; ``ParseError`` naming the depth when too deep."""
    try:
        parser.feed(text)
        return parser.close()
    except TooDeep:
        raise ParseError(source, text, f"XML nested more than {MAX_DEPTH} elements deep") \
            from None


def _builder() -> Any:
    """A tree builder that raises :class:`TooDeep` when an element opens deeper than
    :data:`MAX_DEPTH` (made here: ``xml.etree`` is imported by the first parse)."""
    from xml.etree.ElementTree import TreeBuilder  # noqa: S405 - builds, does not parse

    class DepthBuilder(TreeBuilder):
        depth = 0

        def start(self, tag: str, attrs: dict[str, str]) -> Element:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise TooDeep(tag)
            return super().start(tag, attrs)

        def end(self, tag: str) -> Element:
            self.depth -= 1
            return super().end(tag)

    return DepthBuilder()
