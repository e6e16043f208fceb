"""The measured loops: benchmarks run and parsed, the per-layer keep-or-restore loop
(``tune``), experiments walked over layers, the fabric sweep and its plan, and the statistics
that decide (intervals, group-sequential boundaries, arm selection)."""
