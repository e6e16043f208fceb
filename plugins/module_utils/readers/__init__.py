"""Readers: one typed reader per file family or command output of a host.

Each module reads one kind of input (a ``/sys`` or ``/proc`` file family, a tool's report, the
BMC's Redfish tree) through a :class:`~..sysroot.Sysroot` and returns plain values; none writes.
Shared value parsers are in ``values.py``, reader errors in ``errors.py``. Gatherers
(``gatherers/``) combine them into a layer's facts; knobs read through them too.
"""
