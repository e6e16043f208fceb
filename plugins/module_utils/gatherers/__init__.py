"""Layer gatherers: one module per layer (``<layer>.py``, the cpu layer in four parts).

A gatherer's ``gather(sysroot, ...)`` calls the readers a layer needs and returns its facts
as a :class:`factsheet.FactSheet` (each fact with where it came from, and what could not be
read). The layer registry (``layers.py``) imports a layer's gatherer on first use.
"""
