"""Module options a task leaves out, filled from the host's variables on the controller.

The fleet modules (``exemplar.tune.facts``, ``layer``, ``restore``) take the host's sysroot,
BMC, profile and knob variables as options. Written as templates in every task
(``"{{ exemplar_sysroot | default('/') }}"``, ``"{{ lookup('exemplar.tune.bmc') }}"``), Ansible
compiles those templates and loads every filter plugin again in each host's worker process,
which costs more than the module's own work on a fleet. Their action plugins call
:func:`module_args` instead: an option the task gives is used as given, an omitted one is read
from the host variable that names it, in Python, by the same lookups a task can call itself.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible.plugins.loader import lookup_loader
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

# option -> the host variable that gives it when the task leaves it out
HOST_VARIABLES = {
    "sysroot": "exemplar_sysroot",
    "layers": "exemplar_layers",
    "profile": "exemplar_profile",
    "profile_candidates": "exemplar_profile_candidates",
    "profile_by_arch": "exemplar_profile_by_arch",
    "run_id": "exemplar_run_id",
    "claim": "exemplar_claim",
    "bench_command": "exemplar_node_bench_command",
}
# earlier names of those variables, still read (with a deprecation warning)
RENAMED = {"exemplar_audit_layers": "exemplar_layers"}


def module_args(action: ActionBase, task_vars: dict[str, Any],
                options: tuple[str, ...]) -> dict[str, Any]:
    """The task's arguments, with each of ``options`` it leaves out read from the host.

    ``bmc`` comes from the ``exemplar.tune.bmc`` lookup and ``variables`` (the knob variables
    of the layers named) from ``exemplar.tune.knob_variables``; the others from
    :data:`HOST_VARIABLES`, left out when the host does not set them (the module's default).
    """
    args = dict(action._task.args)
    for option in options:
        if option in args:
            continue
        if option == "bmc":
            args["bmc"] = _lookup(action, "exemplar.tune.bmc", [], task_vars)
        elif option == "variables":
            args["variables"] = _lookup(action, "exemplar.tune.knob_variables",
                                        list(args.get("layers") or []), task_vars)
        elif (name := _variable(HOST_VARIABLES[option], task_vars)) is not None:
            args[option] = action._templar.template(task_vars[name])
    return args


def _variable(name: str, task_vars: dict[str, Any]) -> str | None:
    """``name`` if the host sets it, else an earlier name of it that the host sets."""
    if name in task_vars:
        return name
    for old, new in RENAMED.items():
        if new == name and old in task_vars:
            Display().deprecated(f"{old} is renamed {new}", version="0.3.0",
                                 collection_name="exemplar.tune")
            return old
    return None


def _lookup(action: ActionBase, name: str, terms: list[str], task_vars: dict[str, Any]) -> Any:
    lookup = lookup_loader.get(name, loader=action._loader, templar=action._templar)
    return lookup.run(terms, variables=task_vars)[0]


class HostOptionsAction(ActionBase):
    """An action that runs its module with :func:`module_args` for ``OPTIONS``."""

    OPTIONS: tuple[str, ...] = ()
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run the module once, with the options the task left out filled from the host
        (``async`` as for any module)."""
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = module_args(self, task_vars, self.OPTIONS)
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        result = merge_hash(result, self._execute_module(module_args=args, task_vars=task_vars,
                                                         wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
