"""The Ansible side shared by the modules: the facts module's body, the knob modules' common
options and results, and the payload's bytecode cache. Nothing outside ``plugins/modules``
needs these."""
