"""Knob families: a setting of a common kind, declared as one call.

Each family is a :class:`~knobs.State` (how the host shows the setting, read back as a fact
of the layer) and a planner (the changes that set it, which the engine journals, writes,
reads back and restores). A family call returns a registered :class:`~knobs.Knob`; every
other name of the setting is derived from its layer and name by one rule::

    knob            cpu.numa_balancing
    check           cpu.numa-balancing           (when the call declares ``check=``)
    profile key     cpu: {numa_balancing: 0}     (its JSON schema is ``schema``)
    fact            facts["cpu"]["numa_balancing"]
    role variables  cpu_numa_balancing (false: skip), cpu_numa_balancing_target (override)

Shared settings are one per layer and family: ``<layer>_sysctl_path`` (the ``sysctl.d``
file every sysctl knob of the layer writes its line into) and the layer's bootloader
defaults file for kernel arguments. Values are checked against the key's schema before
anything is rendered; a string value's schema must carry a ``pattern`` (checked when the
knob is declared), so no value can change the syntax of the file it is written into.

A family knob whose profile sets a value but whose host has nothing it could write raises
``NotApplicable`` with the reason (the engine skips the knob with it; the audit reports it as
not applicable, never as "no drift"): a sysctl whose ``/proc/sys`` entry the kernel does not
have, a sysfs attribute glob that matches no attribute, a systemd drop-in on a host whose init
system is not systemd. A knob whose profile sets no value plans nothing (``[]``).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import (
    BOOTLOADER,
    CheckSpec,
    Knob,
    KnobInputError,
    Setting,
    State,
    Target,
    flag,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import (
    SYSTEMD_UNIT,
    clean_path,
    matching,
    one_line,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotApplicable,
    NotSupported,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.values import (
    parse_int,
    selected_choice,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

if TYPE_CHECKING:  # planning needs these; reading a knob's state (every facts run) does not
    from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import Change

SYSCTL_FILE = "/etc/sysctl.d/90-exemplar-tune.conf"
WHOLE = re.compile(r"^-?[0-9]{1,19}$")
WILDCARD = re.compile(r"[*?\[]")
PROPERTY = re.compile(r"^[A-Z][A-Za-z0-9]{0,63}$")


def profile_value(value: Any, schema: dict[str, Any], what: str) -> str:
    """``value`` as the host takes it (``"1"`` for true), checked against ``schema``
    (type, ``minimum``, ``maximum``, ``enum``, ``pattern``); ``KnobInputError`` otherwise."""
    kind = schema["type"]
    if kind == "boolean":
        return "1" if flag(value, what) else "0"
    if kind == "integer":
        if isinstance(value, bool) or not WHOLE.match(str(value)):
            raise KnobInputError(what, f"{value!r} is not a whole number")
        number = int(value)
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and number < low or high is not None and number > high:
            raise KnobInputError(what, f"{number} is outside {low}..{high}")
        text = str(number)
    else:
        text = matching(one_line(value, what), re.compile(schema["pattern"]), what)
    if "enum" in schema and text not in {str(v) for v in schema["enum"]}:
        raise KnobInputError(what, f"{text!r} is not one of {schema['enum']}")
    return text


def host_value(text: str, schema: dict[str, Any], source: str) -> Any:
    """A value the host reports, typed as the profile key is (an integer key reads an
    integer, ``ParseError`` when it is none); never range-checked: what the host reports is
    data, and a value outside the profile's range simply does not match."""
    if schema["type"] in ("integer", "boolean"):
        number = parse_int(text, source)
        return bool(number) if schema["type"] == "boolean" else number
    return text


def _want(state: Any, target: Target) -> str | None:
    """The profile's (or the override's) value for the knob, checked against its schema and
    free of the characters the family's file gives a meaning (``State.forbidden``)."""
    want = target.want.get(state.fact)
    if want is None:
        return None
    what = f"{state.layer}.{state.fact}"
    value = profile_value(want, state.schema, what)
    bad = sorted({c for c in value if c in state.forbidden or state.one_word and c.isspace()})
    if bad:
        raise KnobInputError(what, f"{value!r} holds {''.join(bad)!r}, which the "
                             f"{type(state).__name__.lower()} value cannot carry")
    return value


def systemd_absent(root: Sysroot) -> str | None:
    """Why systemd does not run this host's units, as one line; ``None`` when it does.

    systemd is the init system when ``/run/systemd/system`` exists (sd_booted(3)); a captured
    tree may instead hold a ``systemctl show`` that answered. A host whose PID 1 is something
    else (a container's, a sandbox's) has no units for a drop-in to change.
    """
    from ansible_collections.exemplar.tune.plugins.module_utils.readers.systemd import (
        BOOTED_MARK,
        read_systemctl_show,
    )
    if root.exists(BOOTED_MARK):
        return None
    try:
        if read_systemctl_show(root) is not None:
            return None
    except HostStateError:
        pass  # a captured systemctl that failed: not booted with systemd either
    init = (root.read_optional("proc/1/comm") or "").strip()
    seen = "not present" if root.live else "not present, nor a systemctl show that answered"
    return f"{seen}: systemd is not the init system" + (f" (PID 1 is {init})" if init else "")


def _absent_proc(root: Sysroot, proc: str, label: str) -> NotApplicable:
    """Why the kernel parameter ``label`` cannot be set: no ``/proc/sys`` at all, or no entry
    for it there (the running kernel does not have it)."""
    if not root.is_dir("proc/sys"):
        where = "procfs not mounted" if root.live else "not in this tree"
        return NotApplicable(root.display("proc/sys"), f"not present ({where}): {label} cannot "
                             "be read or set")
    return NotApplicable(root.display(proc), f"not present: the running kernel has no {label} "
                         "(built without it, or its module is not loaded)")


class Sysctl(State):
    """A kernel parameter (``label``: ``kernel.numa_balancing``) of one value: ``/proc/sys``
    now, and its line in the layer's ``sysctl.d`` file (edited line by line, so several knobs
    share it). With ``minimum``, the profile's value is a floor: a host at or above it
    matches and is left as it is (``vm.max_map_count``)."""

    forbidden = "#;"
    one_word = True  # /proc/sys shows several values tab-separated: not this family's

    def __init__(self, layer: str, fact: str, label: str, schema: dict[str, Any],
                 minimum: bool = False, boot_arg: tuple[str, dict[int, str]] | None = None
                 ) -> None:
        super().__init__(layer, fact, label, schema)
        self.minimum, self.boot_arg = minimum, boot_arg

    def matches(self, have: Any, want: Any) -> bool:  # noqa: D102
        if self.minimum and isinstance(have, int) and isinstance(want, int):
            return have >= want
        return bool(have == want)

    @property
    def proc(self) -> str:
        """The parameter's file under ``/proc/sys``."""
        return "proc/sys/" + self.label.replace(".", "/")

    @property
    def fix(self) -> str:
        """The manual fix, for the check."""
        return f"sysctl {self.label}=<profile value> (persist in /etc/sysctl.d)"

    def source(self, root: Sysroot) -> str:  # noqa: D102
        return root.display(self.proc)

    def read(self, root: Sysroot) -> Any:  # noqa: D102
        text = root.read_optional(self.proc)
        return None if text is None else host_value(text, self.schema, self.source(root))

    def plan(self, root: Sysroot, target: Target) -> list[Change]:
        """The runtime value, then the ``sysctl.d`` line; ``NotApplicable`` when the kernel
        has no ``/proc/sys`` entry for the parameter (a ``sysctl.d`` line for it would only
        fail at every boot). Nothing where the value holds already and the host's active
        TuneD profile sets it (TuneD writes it at every boot), nor for a floor already met."""
        value = _want(self, target)
        if value is None:
            return []
        from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import AttrChange
        from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import (
            plan_env_file,
        )
        path = clean_path(target.settings[f"{self.layer}_sysctl_path"],
                          f"{self.layer}_sysctl_path")
        if not root.exists(self.proc):
            raise _absent_proc(root, self.proc, self.label)
        if self._held(root, value):
            return []
        return [AttrChange(self.proc, value),
                *plan_env_file(root, path, {self.label: value}, "sysctl")]


    def _held(self, root: Sysroot, value: str) -> bool:
        """Whether ``value`` needs nothing written: the floor is met, or the value holds and
        the host's active TuneD profile sets it at every boot (in its ``[sysctl]``, or as the
        parameter's kernel argument ``boot_arg``: ``numa_balancing=disable``)."""
        from ansible_collections.exemplar.tune.plugins.module_utils.knobs.grub import (
            tuned_boot_args,
        )
        from ansible_collections.exemplar.tune.plugins.module_utils.readers.tuned import (
            active_sysctls,
        )
        try:
            have = self.read(root)
        except HostStateError:
            return False  # the plan reports what it finds
        if not self.matches(have, host_value(value, self.schema, self.label)):
            return False
        if self.minimum or active_sysctls(root).get(self.label) == value:
            return True
        arg, values = self.boot_arg or ("", {})
        return bool(arg) and tuned_boot_args(root).get(arg, False) == values.get(have)


class SysfsAttr(State):
    """One attribute over a glob of devices or CPUs (``label``, relative to the root), written
    in place (runtime). An attribute that lists its choices (``always [madvise] never``)
    reads as the one in force. ``absent`` says why a host may have none of the attributes
    (``no cpufreq driver ...``): the reason the knob does not apply there."""

    def __init__(self, layer: str, fact: str, glob: str, schema: dict[str, Any],
                 absent: str = "") -> None:
        super().__init__(layer, fact, "/" + glob, schema)
        self.glob, self.absent = glob, absent

    @property
    def fix(self) -> str:  # noqa: D102
        return f"write the profile value to {self.label}"

    def source(self, root: Sysroot) -> str:  # noqa: D102
        return root.display(self.glob)

    def read(self, root: Sysroot) -> dict[str, int] | None:
        """How many of the attributes hold each value; ``None`` when the host has none."""
        values = Counter(selected_choice(v) for v in
                         (root.read_optional(p) for p in root.glob(self.glob)) if v is not None)
        return dict(sorted(values.items())) or None

    def matches(self, have: Any, want: Any) -> bool:  # noqa: D102
        return set(have) == {profile_value(want, self.schema, self.fact)}

    def plan(self, root: Sysroot, target: Target) -> list[Change]:
        """The value on every attribute the glob finds; ``NotApplicable`` when it finds none."""
        from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import AttrChange
        value = _want(self, target)
        if value is None:
            return []
        found = [path for path in root.glob(self.glob) if root.exists(path)]
        if not found:
            raise self.not_found(root)
        return [AttrChange(path, value) for path in found]

    def not_found(self, root: Sysroot) -> NotApplicable:
        """The reason the knob does not apply to a host without any of the attributes: the
        glob's fixed directory and what it holds none of (``/sys/devices/system/cpu/cpufreq:
        no policy[0-9]*/scaling_governor: ...``), then ``absent``."""
        parts = self.glob.split("/")
        first = next((i for i, part in enumerate(parts) if WILDCARD.search(part)), len(parts))
        if first == len(parts):
            path, what = self.glob, "not present"
        else:
            path, what = "/".join(parts[:first]), f"no {'/'.join(parts[first:])}"
        return NotApplicable(root.display(path), f"{what}: {self.absent}" if self.absent
                             else what)


class KernelArg(State):
    """A kernel command-line argument (``label``), in the bootloader defaults file ``grub``
    (next boot).

    A boolean key adds the bare argument (true) or removes it (false); another value is
    written as ``arg=value``. The fact is what the running kernel got: its value, ``True`` for
    a bare argument, ``False`` when absent.
    """

    forbidden = "\"'\\"  # quoting and escapes of the bootloader's shell-style file
    one_word = True  # a blank would start another argument

    def __init__(self, layer: str, fact: str, label: str, schema: dict[str, Any],
                 grub: Setting) -> None:
        super().__init__(layer, fact, label, schema)
        self.grub = grub

    @property
    def fix(self) -> str:  # noqa: D102
        return f"set {self.label} on the kernel command line (bootloader defaults), then reboot"

    def source(self, root: Sysroot) -> str:  # noqa: D102
        return root.display("proc/cmdline")

    def read(self, root: Sysroot) -> Any:  # noqa: D102
        from ansible_collections.exemplar.tune.plugins.module_utils.readers.cmdline import (
            read_cmdline,
        )
        try:
            params = read_cmdline(root)
        except NotSupported:
            return None
        if self.label not in params:
            return False
        return True if params[self.label] is None else params[self.label]

    def matches(self, have: Any, want: Any) -> bool:  # noqa: D102
        if self.schema["type"] == "boolean":
            return have is not False if want else have is False
        return have == profile_value(want, self.schema, self.fact)

    def plan(self, root: Sysroot, target: Target) -> list[Change]:
        """The argument set (or removed) in the defaults file, and the bootloader rebuilt."""
        from ansible_collections.exemplar.tune.plugins.module_utils.knobs.grub import plan_cmdline
        value = _want(self, target)
        if value is None:
            return []
        path = clean_path(target.settings[self.grub.name], self.grub.name)
        boolean = self.schema["type"] == "boolean"
        add = {} if boolean and value == "0" else {self.label: None if boolean else value}
        # every earlier value goes (GRUB_CMDLINE_LINUX_DEFAULT's comes later and would win)
        return plan_cmdline(root, path, [self.label], add, target.settings[BOOTLOADER.name])


class FileKey(State):
    """One key (``label``) of a ``KEY=VALUE`` configuration file (``envfile`` syntaxes),
    edited line by line; with ``service``, that service is reloaded or restarted (if running)
    afterwards."""

    def __init__(self, layer: str, fact: str, label: str, schema: dict[str, Any],
                 path: str, syntax: str, service: str | None = None) -> None:
        super().__init__(layer, fact, label, schema)
        self.path, self.syntax, self.service = path, syntax, service

    @property
    def fix(self) -> str:  # noqa: D102
        return (f"set {self.label} in {self.path}"
                + (f", then systemctl try-reload-or-restart {self.service}"
                   if self.service else ""))

    def source(self, root: Sysroot) -> str:  # noqa: D102
        return root.display(self.path)

    def read(self, root: Sysroot) -> str:
        """The key's effective value in the file; ``""`` when it is not set."""
        from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import (
            line_key,
            line_value,
        )
        text = root.read_optional(self.path) or ""
        found = [line for line in text.splitlines() if line_key(line, self.syntax) == self.label]
        if not found:
            return ""
        return line_value(found[0] if self.syntax == "nccl" else found[-1], self.syntax)

    def matches(self, have: Any, want: Any) -> bool:  # noqa: D102
        return have == profile_value(want, self.schema, self.fact)

    def plan(self, root: Sysroot, target: Target) -> list[Change]:
        """The key's line, then the service step."""
        from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import (
            plan_env_file,
        )
        value = _want(self, target)
        if value is None:
            return []
        changes = plan_env_file(root, self.path, {self.label: value}, self.syntax)
        if self.service:
            from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
                service_step,
            )
            changes.append(service_step(self.service, "try-reload-or-restart", root))
        return changes


class DropIn(State):
    """A property ``prop`` of ``[section]`` of a systemd ``unit``, in a drop-in of its own,
    made effective with ``systemctl daemon-reload`` (and a restart of the unit, if running,
    with ``restart``)."""

    forbidden = "\\%"  # a line continuation, a unit-file specifier

    def __init__(self, layer: str, fact: str, schema: dict[str, Any], unit: str,
                 section: str, prop: str, restart: bool = False) -> None:
        super().__init__(layer, fact, f"{unit}: {prop}", schema)
        self.unit, self.section, self.prop, self.restart = unit, section, prop, restart

    @property
    def path(self) -> str:
        """The drop-in the knob owns."""
        return f"/etc/systemd/system/{self.unit}.d/90-exemplar-tune-{self.fact}.conf"

    @property
    def fix(self) -> str:  # noqa: D102
        return f"systemctl edit {self.unit}: [{self.section}] {self.prop}=<profile value>"

    def source(self, root: Sysroot) -> str:  # noqa: D102
        return root.display(f"/etc/systemd/system/{self.unit}.d")

    def read(self, root: Sysroot) -> str:
        """The property as the unit's drop-ins set it (its own or another's, such as a TuneD
        script's): every ``<unit>.d/*.conf`` of ``/etc``, ``/run`` and ``/usr/lib``, a name in
        ``/etc`` hiding the same name below, read in file-name order, the last assignment in
        ``[section]`` winning (systemd.unit(5)); ``""`` when none sets it."""
        files: dict[str, str] = {}
        for base in ("usr/lib/systemd/system", "run/systemd/system", "etc/systemd/system"):
            folder = f"{base}/{self.unit}.d"
            files.update({name: f"{folder}/{name}" for name in root.listdir(folder)
                          if name.endswith(".conf")})
        found = ""
        for name in sorted(files):
            section = ""
            for line in (root.read_optional(files[name]) or "").splitlines():
                line = line.strip()
                if line.startswith("[") and line.endswith("]"):
                    section = line[1:-1]
                    continue
                key, sep, value = line.partition("=")
                if sep and section == self.section and key.strip() == self.prop:
                    found = value.strip()
        return found

    def matches(self, have: Any, want: Any) -> bool:  # noqa: D102
        return have == profile_value(want, self.schema, self.fact)

    def plan(self, root: Sysroot, target: Target) -> list[Change]:
        """The drop-in, ``daemon-reload`` and the optional restart; ``NotApplicable`` where
        systemd is not the init system."""
        from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
            FileChange,
            service_step,
        )
        value = _want(self, target)
        if value is None or self.read(root) == value:
            return []  # nothing asked, or a drop-in (this knob's or another's) sets it already
        why = systemd_absent(root)
        if why is not None:
            raise NotApplicable(root.display("run/systemd/system"), why)
        text = (f"# Managed by exemplar-tune (knob {self.layer}.{self.fact}); put back by "
                f"exemplar-tune restore.\n[{self.section}]\n{self.prop}={value}\n")
        changes: list[Change] = [FileChange(self.path, text.encode(), own=True),
                                 service_step("", "daemon-reload", root)]
        if self.restart:
            changes.append(service_step(self.unit, "try-restart", root))
        return changes


def _declare(state: Any, summary: str, settings: tuple[Setting, ...], check: CheckSpec | None,
             doc: str, reboot: bool = False) -> Knob:
    """The knob of ``state``, with every name derived from its layer and fact."""
    schema = state.schema
    if schema.get("type") not in ("integer", "boolean", "string") or \
            schema["type"] == "string" and "pattern" not in schema or "description" not in schema:
        raise ValueError(f"knob {state.layer}.{state.fact}: a family value's schema needs a "
                         "type (integer, boolean or string), a description and, for a "
                         "string, a pattern")
    if check is not None and not check.fix:
        check = CheckSpec(check.severity, check.title, check.risk, state.fix, check.status)
    return Knob(state.layer, state.fact, summary, state.plan, {state.fact: schema}, settings,
                reboot=reboot, state=state, check=check, doc=doc)


def sysctl(layer: str, name: str, key: str, summary: str, schema: dict[str, Any], *,
           check: CheckSpec | None = None, doc: str = "", minimum: bool = False,
           boot_arg: tuple[str, dict[int, str]] | None = None) -> Knob:
    """A kernel parameter (``kernel.numa_balancing``), now and in the layer's sysctl.d file;
    ``minimum``: the profile's value is a floor (an integer), raised to, never lowered;
    ``boot_arg``: the kernel argument that sets it at boot, with its value for each of the
    parameter's (``("numa_balancing", {0: "disable", 1: "enable"})``)."""
    if minimum and schema.get("type") != "integer":
        raise ValueError(f"knob {layer}.{name}: a minimum is an integer")
    matching(key, re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_-]+)+$"), f"{layer}.{name}: key")
    path = Setting(f"{layer}_sysctl_path", SYSCTL_FILE,
                   f"The sysctl.d file that persists the {layer} layer's kernel parameters "
                   "(one line per parameter, edited in place).")
    return _declare(Sysctl(layer, name, key, schema, minimum, boot_arg), summary, (path,),
                    check, doc)


def sysfs_attr(layer: str, name: str, glob: str, summary: str, schema: dict[str, Any], *,
               check: CheckSpec | None = None, doc: str = "", absent: str = "") -> Knob:
    """An attribute over a glob (``sys/devices/system/cpu/cpufreq/policy[0-9]*/...``);
    ``absent`` says why a host may have none (the knob's not-applicable reason there)."""
    if not glob.startswith(("sys/", "proc/sys/")):
        raise ValueError(f"knob {layer}.{name}: {glob!r} is not under sys/ or proc/sys/")
    state = SysfsAttr(layer, name, glob, schema, one_line(absent, f"{layer}.{name}: absent"))
    return _declare(state, summary, (), check, doc)


def kernel_arg(layer: str, name: str, arg: str, summary: str, schema: dict[str, Any], *,
               grub: Setting, check: CheckSpec | None = None, doc: str = "") -> Knob:
    """A kernel argument in the bootloader defaults ``grub`` (takes effect at the next boot)."""
    matching(arg, re.compile(r"^[A-Za-z0-9_.-]{1,64}$"), f"{layer}.{name}: argument")
    return _declare(KernelArg(layer, name, arg, schema, grub), summary, (grub, BOOTLOADER),
                    check, doc, reboot=True)


def file_key(layer: str, name: str, path: str, key: str, syntax: str, summary: str,
             schema: dict[str, Any], *, service: str | None = None,
             check: CheckSpec | None = None, doc: str = "") -> Knob:
    """A key of the configuration file ``path`` (one path: the fact reads where the knob
    writes); ``service`` is reloaded or restarted after a change."""
    from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import KEYS
    if syntax not in KEYS or syntax == "sysctl":
        raise ValueError(f"knob {layer}.{name}: syntax {syntax!r} is not nccl or shell")
    matching(key, KEYS[syntax], f"{layer}.{name}: key")
    clean_path(path, f"{layer}.{name}: path")
    if service is not None:
        matching(service, SYSTEMD_UNIT, f"{layer}.{name}: service")
    return _declare(FileKey(layer, name, key, schema, path, syntax, service), summary, (),
                    check, doc)


def dropin(layer: str, name: str, unit: str, section: str, prop: str, summary: str,
           schema: dict[str, Any], *, restart: bool = False, check: CheckSpec | None = None,
           doc: str = "") -> Knob:
    """A property of a systemd unit in a drop-in; ``restart`` restarts the unit if running."""
    matching(unit, SYSTEMD_UNIT, f"{layer}.{name}: unit")
    matching(prop, PROPERTY, f"{layer}.{name}: property")
    matching(section, PROPERTY, f"{layer}.{name}: section")
    return _declare(DropIn(layer, name, schema, unit, section, prop, restart),
                    summary, (), check, doc)
