"""exemplar-tune: find and close the performance gap of AI-training GPU clusters."""

# The one version: pyproject.toml reads it; galaxy.yml and the changelog's newest release
# must say the same (tests/test_version.py).
__version__ = "0.2.0"
