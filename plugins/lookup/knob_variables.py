"""exemplar.tune.knob_variables: the role variables the knobs of some layers read."""

from __future__ import annotations

DOCUMENTATION = r"""
name: knob_variables
short_description: The knob variables (switches, target overrides, settings) that are set
description:
  - For the layers named (default every layer with knobs), returns a dict of each knob
    variable the knob registry declares (C(cpu_governor), C(cpu_governor_target),
    C(cpu_housekeeping_units), C(exemplar_bootloader_command) ...) that is defined for the
    host - inventory, play, role defaults or extra vars - with its value. Unset variables are
    left out, so the registry's defaults apply.
  - For the runtime layer, the controller-side topology is rendered or read here and returned
    as C(runtime_topo_content) (unless that variable is set itself) - the template
    C(runtime_topo_template) rendered with the host's variables (the C(ansible.builtin.template)
    lookup), else the file C(runtime_topo_source), else the profile's C(runtime.topo_source)
    from C(exemplar_profile); a file that is missing or empty fails the lookup.
  - The layer roles and the C(exemplar.tune.apply) and C(exemplar.tune.audit) playbooks pass it
    to M(exemplar.tune.layer), so all of them read the same variables.
version_added: "0.2.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  _terms:
    description: Layer names.
    type: list
    elements: str
    required: false
"""

EXAMPLES = r"""
- name: Audit every layer with the host's knob variables
  exemplar.tune.layer:
    layers: [gpu, vm, cpu, runtime, fabric]
    profile: "{{ exemplar_profile }}"
    variables: "{{ lookup('exemplar.tune.knob_variables') }}"
  check_mode: true
"""

RETURN = r"""
_raw:
  description: One dict, variable name to value.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleError
from ansible.plugins.loader import lookup_loader
from ansible.plugins.lookup import LookupBase
from ansible_collections.exemplar.tune.plugins.plugin_utils.knob_variable_names import (
    LAYER_VARIABLES,
)


class LookupModule(LookupBase):
    """Lookup plugin body."""

    def run(self, terms, variables=None, **kwargs):  # noqa: D102 - Ansible's signature
        variables = variables or {}
        unknown = [name for name in terms if name not in LAYER_VARIABLES]
        if unknown:
            raise AnsibleError(f"unknown layer {unknown[0]!r}; layers with knobs: "
                               f"{', '.join(LAYER_VARIABLES)}")
        # the registry's names as generated data: importing the registry in every host's
        # worker would compile it from source each time
        names = dict.fromkeys(v for layer in (terms or LAYER_VARIABLES)
                              for v in LAYER_VARIABLES[layer])
        found = {name: self._templar.template(variables[name]) for name in names
                 if name in variables}
        if "runtime_topo_content" in names and "runtime_topo_content" not in found:
            found["runtime_topo_content"] = self._topology(variables)
        return [found]

    def _topology(self, variables):
        """The controller-side topology's text: the template rendered, else the file read
        ('' when neither is named)."""
        template = self._templar.template(variables.get("runtime_topo_template") or "")
        if template:
            render = lookup_loader.get("ansible.builtin.template", loader=self._loader,
                                       templar=self._templar)
            return render.run([template], variables)[0]
        source = self._templar.template(variables.get("runtime_topo_source") or "")
        if not source:
            profile = self._templar.template(variables.get("exemplar_profile") or {}) or {}
            source = (profile.get("runtime") or {}).get("topo_source") or ""
        if not source:
            return ""
        path = self.find_file_in_search_path(variables, "files", source, ignore_missing=True)
        try:
            with open(path or source, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError):
            text = ""
        if not text:
            raise AnsibleError(f"runtime_topo_source {source} is missing or empty on the "
                               "controller")
        return text
