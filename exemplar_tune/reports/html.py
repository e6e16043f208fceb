"""The HTML side of every report: the packaged jinja2 templates and matplotlib charts as SVG.

Templates are files in ``exemplar_tune/templates`` (package data), rendered with autoescaping
on and undefined names as errors. Charts are matplotlib figures written as SVG text that a page
holds inline: text stays text (``svg.fonttype: none``, so it is searchable, selectable and
escaped by matplotlib), no metadata, fixed ids (the same data gives the same bytes). Every
axes of a chart must have an x and a y label; the labels carry the ids
``<chart>-<n>-x-label`` and ``<chart>-<n>-y-label``. No scripts, nothing fetched. matplotlib is
the ``charts`` extra: without it a chart (:func:`drawn`) is a one-line note and the page is
made all the same.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SVG_SETTINGS = {"svg.fonttype": "none", "svg.hashsalt": "exemplar-tune",
                "font.family": "sans-serif"}
NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
TIME_UNITS = ("ns", "us", "ms", "s", "min", "h")


@functools.cache
def environment() -> jinja2.Environment:
    """The jinja2 environment of the packaged templates (autoescaped, strict)."""
    return jinja2.Environment(loader=jinja2.PackageLoader("exemplar_tune", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)


def render(template: str, **context: Any) -> str:
    """Template ``template`` (a file name under ``templates/``) filled with ``context``."""
    return environment().get_template(template).render(**context)


# where matplotlib (the ``charts`` extra) is not installed, a chart is this note instead
NO_CHARTS = Markup('<p class="muted">No chart here: matplotlib is not installed '
                   "(pip install 'exemplar-tune[charts]').</p>")


def drawn(draw: Callable[..., Markup]) -> Callable[..., Markup]:
    """``draw`` (a chart function), or :data:`NO_CHARTS` where matplotlib is not installed:
    the page is made without its charts, saying why."""
    @functools.wraps(draw)
    def chart(*args: Any, **kwargs: Any) -> Markup:
        try:
            import matplotlib  # noqa: F401 - only whether it is there
        except ImportError:
            return NO_CHARTS
        return draw(*args, **kwargs)
    return chart


def new_figure(width: float, height: float) -> Figure:
    """An empty matplotlib figure of ``width`` x ``height`` inches (SVG backend, no pyplot)."""
    import matplotlib

    matplotlib.use("svg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def svg(figure: Figure, name: str) -> Markup:
    """``figure`` as inline SVG markup; ``name`` prefixes its label ids.

    Raises ``ValueError`` for an axes without an x or a y label: a chart must say what it shows.
    """
    import matplotlib

    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", name)
    for index, axes in enumerate(figure.axes):
        for letter, axis in (("x", axes.xaxis), ("y", axes.yaxis)):
            if not axis.label.get_text().strip():
                raise ValueError(f"chart {name}: axes {index} has no {letter} label")
            axis.label.set_gid(f"{slug}-{index}-{letter}-label")
    buffer = io.StringIO()
    with matplotlib.rc_context(SVG_SETTINGS):
        figure.tight_layout()
        figure.savefig(buffer, format="svg", metadata=NO_METADATA)
    text = buffer.getvalue()
    return Markup(text[text.index("<svg"):])  # noqa: S704 - matplotlib escapes the text it writes


def higher_is_better(unit: str) -> bool:
    """Whether a benchmark value in ``unit`` is better when higher: rates (``GB/s``) are, times
    (``ms`` per step) are not. The ledger keeps the unit, not the shape's direction."""
    return unit.endswith("/s")


def quantity(unit: str) -> str:
    """What a value in ``unit`` measures, for an axis label: step time, rate or value."""
    if higher_is_better(unit):
        return "rate"
    return "step time" if unit in TIME_UNITS else "value"


def axis_label(shape: str, unit: str) -> str:
    """``dense step time (ms), lower is better``."""
    better = "higher" if higher_is_better(unit) else "lower"
    return f"{shape} {quantity(unit)} ({unit}), {better} is better"
