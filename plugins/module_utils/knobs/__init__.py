"""What a knob is: one registered setting of a layer.

A knob declares, once: its layer and name, the keys of the profile's layer section it reads
(its target) with their JSON schema, its own settings
(paths, unit lists ...) with their defaults, whether it needs a reboot, and a **planner**: a
pure function ``(sysroot, target) -> list of changes`` (``changes.FileChange`` ...). The
planner only reads; the change engine journals, writes, reads back and restores.

Most knobs belong to a **family** (``knobs/families.py``: a sysctl, a sysfs attribute, a
kernel argument, a key in a configuration file, a systemd drop-in property): one call there
declares the knob, the fact that shows its state and, optionally, its preflight check
(:class:`CheckSpec`). Every other name is derived by one rule: the switch variable is
``<layer>_<knob>`` (``cpu_governor``), the variable overriding a profile key is
``<layer>_<key>_target`` (``cpu_governor_target``), the check id is the knob's with ``-`` for
``_`` (``cpu.governor``), and a family knob's fact is its name. Knobs
that need real logic are written as planners and registered the same way. Each layer's
knobs live in ``knobs/<layer>.py`` and are listed by the layer registry
(``layers.Layer.knobs``); the role argument specs, the profile schema's knob keys and the
README's tables are generated from them (``python -m exemplar_tune.registry_docs``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

if TYPE_CHECKING:  # imported when first planned (Knob.plan); these lines ship them
    from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import Change
    from ansible_collections.exemplar.tune.plugins.module_utils.knobs.planners import (  # noqa
        cpu,
        fabric,
        gpu,
        runtime,
        vm,
    )


class KnobInputError(HostStateError):
    """A target or setting a planner refuses (nothing was changed)."""


def flag(value: Any, name: str) -> bool:
    """A role variable as a boolean, read as Ansible reads booleans (``yes``, ``1``, ``on``
    ...); ``KnobInputError`` naming the variable for anything else."""
    try:
        from ansible.module_utils.parsing.convert_bool import boolean  # not needed for facts
        return boolean(value, strict=True)
    except TypeError:
        raise KnobInputError(name, f"{value!r} is not a boolean") from None


@dataclass(frozen=True)
class Setting:
    """A role variable of a knob (``cpu_housekeeping_units``) and its default.

    ``type`` is the argument spec's type (default: from ``default``, ``path`` for a name
    ending in ``_path``); ``choices`` the values it takes, when it is a closed set.
    """

    name: str
    default: Any
    description: str
    type: str = ""
    choices: tuple[str, ...] = ()

    @property
    def spec_type(self) -> str:
        """The argument spec's type of the variable."""
        if self.type:
            return self.type
        if self.name.endswith("_path"):
            return "path"
        kinds = {bool: "bool", int: "int", list: "list", dict: "dict"}
        return kinds.get(type(self.default), "str")

    def read(self, value: Any) -> Any:
        """``value`` given for this setting: a boolean setting takes only a boolean (as
        Ansible reads them; ``KnobInputError`` naming the variable otherwise); other values
        are checked by their planners."""
        return flag(value, self.name) if isinstance(self.default, bool) else value


@dataclass(frozen=True)
class CheckSpec:
    """The preflight check a family knob declares: the host's state against the profile.

    Its id is the knob's with ``-`` for ``_`` (``cpu.numa-balancing``); ``status`` is what a
    mismatch reports (``warn`` for a tuning preference, ``fail`` for what makes a node unfit);
    ``fix`` defaults to naming the knob.
    """

    severity: str
    title: str
    risk: str
    fix: str = ""
    status: str = "warn"


class State:
    """A family's setting: the host's state read back as one fact of the layer, how to judge
    it against the profile, and the planner that sets it (``plan``, in the family).

    ``fact`` is the knob's name and the fact's key; ``label`` the setting as an operator names
    it (``kernel.numa_balancing``); ``schema`` the profile key's JSON schema.
    """

    forbidden = ""  # characters the family's file gives a meaning to
    one_word = False  # True: no whitespace either

    def __init__(self, layer: str, fact: str, label: str, schema: dict[str, Any]) -> None:
        self.layer, self.fact, self.label, self.schema = layer, fact, label, schema

    @property
    def fix(self) -> str:
        """The manual fix the declared check names (what the knob does, by hand)."""
        raise NotImplementedError

    def source(self, root: Sysroot) -> str:
        """The file or command the fact comes from (evidence)."""
        raise NotImplementedError

    def read(self, root: Sysroot) -> Any:
        """The fact's value; ``None`` when the host does not have the setting."""
        raise NotImplementedError

    def matches(self, have: Any, want: Any) -> bool:
        """True when the fact ``have`` already is the profile's ``want``."""
        return bool(have == want)


@dataclass(frozen=True)
class Target:
    """What a planner gets: the wanted values, its settings, the layer's facts, the BMC."""

    want: dict[str, Any]
    settings: dict[str, Any]
    facts: dict[str, Any]
    bmc: Any = None


Planner = Callable[[Sysroot, Target], "list[Change]"]
AfterCheck = Callable[[Sysroot, Target, "list[Change]"], None]

# Shared by every knob that changes kernel arguments (cpu.cstate_cmdline, vm.*).
BOOTLOADER = Setting("exemplar_bootloader_command", None,
                     "Command (argv) that rebuilds the bootloader configuration after a "
                     "kernel-argument change; it is journaled and run again after C(restore) "
                     "puts the defaults file back. Default C(update-grub), else "
                     "C(grub2-mkconfig -o /boot/grub2/grub.cfg), on a live host; in a sysroot "
                     "nothing runs unless this is set (the rebuild is recorded).", type="list")


@dataclass(frozen=True)
class Knob:
    """One setting of a layer, planned by ``plan``.

    ``planner`` (and ``after``, ``advice``) is a function, or the name of one in
    ``knobs/planners/<layer>.py``, imported when first used. ``profile_keys`` maps each key
    read from the profile's ``<layer>`` section to its JSON schema (with a ``description``;
    the profile schema is generated from it); each key's role variable, ``<layer>_<key>_target``,
    overrides it (a null variable means "from the profile"). ``former`` maps earlier names of
    those variables to their key: still read when the new name is unset, reported by
    :meth:`renamed_in`. ``state`` (family
    knobs) reads the setting back as a fact of the layer, and ``check`` declares the
    preflight check that compares it with the profile. ``doc`` is the role documentation's
    paragraph on the knob (default: its summary). ``after`` (optional) reads the state back
    once every change of the layer was made and raises ``HostStateError`` when the host did
    not take it. ``advice`` (optional) returns the actions outside the host the knob's
    target needs (a hypervisor setting), reported with the result.
    """

    layer: str
    name: str
    summary: str
    planner: Planner | str
    profile_keys: dict[str, dict[str, Any]]
    settings: tuple[Setting, ...] = ()
    facts: tuple[str, ...] = ()
    reboot: bool = False
    after: AfterCheck | str | None = None
    advice: Callable[[Target], list[dict[str, Any]]] | str | None = None
    state: State | None = None
    check: CheckSpec | None = None
    doc: str = ""
    former: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """``layer.name``, as checks and reports name the knob."""
        return f"{self.layer}.{self.name}"

    @property
    def plan(self) -> Planner:
        """The planner, imported on first use when it is named."""
        return self.resolve(self.planner)

    def resolve(self, function: Callable[..., Any] | str) -> Callable[..., Any]:
        """``function`` itself, or the function of that name in ``planners/<layer>.py``."""
        if callable(function):
            return function
        return getattr(import_module(f"{__name__}.planners.{self.layer}"), function)

    @property
    def check_id(self) -> str:
        """The id of the check the knob declares (``cpu.numa-balancing``)."""
        return f"{self.layer}.{self.name.replace('_', '-')}"

    @property
    def switch(self) -> str:
        """The boolean role variable that turns the knob off (``cpu_governor``)."""
        return f"{self.layer}_{self.name}"

    @property
    def overrides(self) -> dict[str, str]:
        """Each role variable that overrides a profile key (``cpu_governor_target``), and
        its key."""
        return {self.target_variable(key): key for key in self.profile_keys}

    def target_variable(self, key: str) -> str:
        """The role variable that overrides profile key ``key``: ``<layer>_<key>_target``."""
        return f"{self.layer}_{key}_target"

    def variables(self) -> tuple[str, ...]:
        """Every role variable the knob reads: its switch, overrides and settings."""
        return (self.switch, *self.overrides, *(s.name for s in self.settings))

    def renamed_in(self, variables: dict[str, Any]) -> list[tuple[str, str]]:
        """``(earlier name, name)`` of each earlier-named variable set in ``variables``."""
        return [(old, self.target_variable(key)) for old, key in self.former.items()
                if variables.get(old) is not None]

    def target(self, section: dict[str, Any], variables: dict[str, Any],
               facts: dict[str, Any], bmc: Any = None) -> Target:
        """The knob's target from the profile section and the role variables given."""
        want = {key: section.get(key) for key in self.profile_keys}
        for var, key in (*self.former.items(), *self.overrides.items()):  # the new name wins
            if variables.get(var) is not None:
                want[key] = variables[var]
        settings = {s.name: s.read(variables[s.name]) if variables.get(s.name) is not None
                    else s.default for s in self.settings}
        return Target(want, settings, facts, bmc)
