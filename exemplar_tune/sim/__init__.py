"""The simulated cluster: a performance model over sysroot hosts, for the demo and for tests."""
