"""Options shared by every exemplar.tune facts module."""

from __future__ import annotations


class ModuleDocFragment:
    """The ``sysroot`` option and the shape of the returned facts."""

    DOCUMENTATION = r"""
options:
  sysroot:
    description:
      - Directory that mirrors C(/) of the host to read instead of the live system
        (a captured bundle unpacked by C(exemplar-tune), or a test fixture).
      - With a sysroot no host command is executed; command outputs are read from
        C(<sysroot>/.exemplar/commands/).
      - Left out of C(exemplar.tune.facts), the host variable C(exemplar_sysroot), else C(/).
    type: path
    default: /
  counter_window:
    description:
      - Seconds between two readings of the InfiniBand/RoCE port error counters (fabric
        layer); each port then also has C(counters_delta), what its counters gained in that
        window. C(0) reads them once (their count since they were last cleared).
    type: float
    default: 0
notes:
  - Read-only; supports check mode (it changes nothing in either mode).
  - Every layer's facts carry C(sources) (the file or command each fact came from) and
    C(errors) (facts that could not be read, with the path and the reason). A fact that could
    not be read is C(null), never a failure of the module.
"""
