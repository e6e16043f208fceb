"""The runtime layer's knobs: the NCCL topology file, the NCCL configuration that names it,
and carrying both into every enroot/pyxis container (planners in ``planners/runtime.py``)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import CheckSpec, Knob, Setting
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.families import dropin
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import PATH_PATTERN

TOPO_FILE = {"nccl_topo_file": {
    "type": ["string", "null"],
    "pattern": PATH_PATTERN,
    "description": "path NCCL_TOPO_FILE must name, or null when the platform needs none"}}
IN_CONTAINER = {"require_in_container": {
    "type": "boolean",
    "description": "the topology file and variable must reach the job container"}}
# the earlier names of the target variables (still read, with a deprecation warning)
TOPO_FORMER = {"runtime_nccl_topo_file": "nccl_topo_file",
               "runtime_require_in_container": "require_in_container"}
ROLE_SUMMARY = ("Give every job, on the host and in its container, the right NCCL topology "
                "file")
ROLE_NOTES = ("Every change is journaled under the run id and put back by "
              "C(tasks_from=restore).",)
ROLE_OPTIONS = {
    "runtime_topo_source": {
        "type": "str", "default": "",
        "description": "Controller-side topology file installed at C(runtime.nccl_topo_file) "
                       "(read with the C(ansible.builtin.file) lookup; a relative path is "
                       "searched in the role and playbook directories). Defaults to the "
                       "profile's C(runtime.topo_source). Set it as a host variable when hosts "
                       "need different files. Empty - keep the file already on the host, or "
                       "fail when there is none."},
    "runtime_topo_template": {
        "type": "str", "default": "",
        "description": "Controller-side Jinja template rendered per host "
                       "(C(ansible.builtin.template) lookup, with the host's variables) and "
                       "installed instead of C(runtime_topo_source)."},
}

KNOBS: tuple[Knob, ...] = (
    Knob("runtime", "nccl_conf", "remove stale NCCL_TOPO_FILE / NCCL_GRAPH_FILE lines",
         "plan_nccl_conf", TOPO_FILE,
         facts=("runtime.nccl_conf_topo_keys",),
         former={"runtime_nccl_topo_file": "nccl_topo_file"},
         doc="C(nccl_conf) removes C(NCCL_TOPO_FILE) lines that name another file than the "
             "profile's, and C(NCCL_GRAPH_FILE) lines that name a missing file, from the NCCL "
             "configuration files (NVIDIA/nccl#1008), keeping every other line byte for byte."),
    Knob("runtime", "topo_file", "install the NCCL topology file and name it in nccl.conf",
         "plan_topo_file", {**TOPO_FILE, **IN_CONTAINER},
         (Setting("runtime_topo_content", "", "Topology XML to install; normally rendered from "
                  "C(runtime_topo_template) or read from C(runtime_topo_source) on the "
                  "controller. When set, it wins over both. Empty - keep the host's file, "
                  "which must exist and be valid."),
          Setting("runtime_topo_mode", "0644", "Permission bits of the installed topology "
                  "file."),
          Setting("runtime_topo_in_nccl_conf", True,
                  "Also set C(NCCL_TOPO_FILE) to C(runtime.nccl_topo_file) in "
                  "C(runtime_nccl_conf_path), so jobs that run on the host read the file too. "
                  "Skipped where enroot is installed and C(runtime.require_in_container) is on "
                  "- the enroot entries carry it instead."),
          Setting("runtime_nccl_conf_path", "/etc/nccl.conf",
                  "The system-wide NCCL configuration file.")),
         facts=("runtime.enroot",), former=TOPO_FORMER,
         doc="C(topo_file) installs the topology file the profile names "
             "(C(runtime.nccl_topo_file)) from a controller-side source, after checking that "
             "NCCL would accept it (a C(<system version=\"1\">) topology, parsed safely), and "
             "points C(NCCL_TOPO_FILE) at it in C(/etc/nccl.conf). With no source, a file "
             "already on the host is left as it is; a host without one fails."),
    Knob("runtime", "enroot_topo", "carry NCCL_TOPO_FILE and the file into every enroot "
         "container", "plan_enroot_topo", {**TOPO_FILE, **IN_CONTAINER},
         (Setting("runtime_enroot_environ_name", "50-nccl.env",
                  "File name in enroot's C(environ.d) holding C(NCCL_TOPO_FILE=<file>)."),
          Setting("runtime_enroot_mount_name", "50-nccl-topo.fstab",
                  "File name in enroot's C(mounts.d) holding the read-only bind of the file.")),
         facts=("runtime.enroot",), former=TOPO_FORMER,
         doc="C(enroot_topo) writes C(environ.d/50-nccl.env) and C(mounts.d/50-nccl-topo.fstab) "
             "when enroot is installed, so every enroot and pyxis container gets the variable "
             "and the file; where pyxis is loaded it also prints the per-job "
             "C(--container-mounts)/C(--container-env) alternative."),
    dropin("runtime", "containerd_limit_stack", "containerd.service", "Service", "LimitSTACK",
           "containerd's stack size limit (LimitSTACK=) in a drop-in",
           {"type": "integer", "minimum": 0, "maximum": 9223372036854775807,
            "description": "LimitSTACK= of containerd.service, bytes: the stack rlimit its "
                           "containers inherit (nvidia-gb200-performance: 67108864)"},
           check=CheckSpec("low", "containerd's LimitSTACK matches the profile",
                           "containers inherit containerd's stack limit: a deep-recursion or "
                           "large-stack thread (compilers, some MPI and CUDA tools) overflows "
                           "an 8 MiB stack")),
)
