"""The planners of the knobs that need real logic, one module per layer.

A knob in ``knobs/<layer>.py`` names its planner (and its ``after``/``advice`` functions) by
function name; :attr:`knobs.Knob.plan` imports ``planners/<layer>.py`` when the knob is first
planned, so reading facts, which needs only the declarations, never loads the change engine.
"""
