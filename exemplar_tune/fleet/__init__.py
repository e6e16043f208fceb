"""Running Ansible over a fleet: inventories and host patterns, the collection on the
controller, one Ansible run and its results, the playbook runs the commands share, the
per-host lock and the reaper that ends a dead controller's children."""
