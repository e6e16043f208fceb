"""What a knob is: one registered setting of a layer, planned in Python.

A knob declares, once: its layer and name, the keys of the profile's layer section it reads
(its target), the role variables that override them, its own settings (paths, unit lists ...)
with their defaults, whether it needs a reboot, and a **planner**: a pure function
``(sysroot, target) -> list of changes`` (``changes.FileChange`` ...). The planner only reads;
the change engine journals, writes, reads back and restores. Each layer's knobs live in
``knobs/<layer>.py`` and are listed by the layer registry (``layers.Layer.knobs``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.exemplar.tune.plugins.module_utils.changes import Change
from ansible_collections.exemplar.tune.plugins.module_utils.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


class KnobInputError(HostStateError):
    """A target or setting a planner refuses (nothing was changed)."""


def flag(value: Any, name: str) -> bool:
    """A role variable as a boolean, read as Ansible reads booleans (``yes``, ``1``, ``on``
    ...); ``KnobInputError`` naming the variable for anything else."""
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise KnobInputError(name, f"{value!r} is not a boolean") from None


@dataclass(frozen=True)
class Setting:
    """A role variable of a knob (``cpu_housekeeping_units``) and its default."""

    name: str
    default: Any
    description: str

    def read(self, value: Any) -> Any:
        """``value`` given for this setting: a boolean setting takes only a boolean (as
        Ansible reads them; ``KnobInputError`` naming the variable otherwise); other values
        are checked by their planners."""
        return flag(value, self.name) if isinstance(self.default, bool) else value


@dataclass(frozen=True)
class Target:
    """What a planner gets: the wanted values, its settings, the layer's facts, the BMC."""

    want: dict[str, Any]
    settings: dict[str, Any]
    facts: dict[str, Any]
    bmc: Any = None


Planner = Callable[[Sysroot, Target], list[Change]]
AfterCheck = Callable[[Sysroot, Target, list[Change]], None]

# Shared by every knob that changes kernel arguments (cpu.cstate_cmdline, vm.*).
BOOTLOADER = Setting("exemplar_bootloader_command", None,
                     "Command that rebuilds the bootloader configuration after a kernel-argument "
                     "change (argv list); default update-grub or grub2-mkconfig on a live host, "
                     "nothing (recorded only) in a sysroot.")


@dataclass(frozen=True)
class Knob:
    """One setting of a layer, planned by ``plan``.

    ``profile_keys`` are read from the profile's ``<layer>`` section; ``overrides`` maps role
    variables to the profile key they override (a null variable means "from the profile").
    ``after`` (optional) reads the state back once every change of the layer was made and
    raises ``HostStateError`` when the host did not take it. ``advice`` (optional) returns
    the actions outside the host the knob's target needs (a hypervisor setting), reported
    with the result.
    """

    layer: str
    name: str
    summary: str
    plan: Planner
    profile_keys: tuple[str, ...]
    overrides: dict[str, str] = field(default_factory=dict)
    settings: tuple[Setting, ...] = ()
    facts: tuple[str, ...] = ()
    reboot: bool = False
    after: AfterCheck | None = None
    advice: Callable[[Target], list[dict[str, Any]]] | None = None
    switched: bool = True  # False: no switch variable (its override already is one)

    @property
    def id(self) -> str:
        """``layer.name``, as checks and reports name the knob."""
        return f"{self.layer}.{self.name}"

    @property
    def switch(self) -> str:
        """The boolean role variable that turns the knob off (``cpu_governor``)."""
        return f"{self.layer}_{self.name}"

    def variables(self) -> tuple[str, ...]:
        """Every role variable the knob reads: its switch, overrides and settings."""
        return (*((self.switch,) if self.switched else ()), *self.overrides,
                *(s.name for s in self.settings))

    def target(self, section: dict[str, Any], variables: dict[str, Any],
               facts: dict[str, Any], bmc: Any = None) -> Target:
        """The knob's target from the profile section and the role variables given."""
        want = {key: section.get(key) for key in self.profile_keys}
        for var, key in self.overrides.items():
            if variables.get(var) is not None:
                want[key] = variables[var]
        settings = {s.name: s.read(variables[s.name]) if variables.get(s.name) is not None
                    else s.default for s in self.settings}
        return Target(want, settings, facts, bmc)
