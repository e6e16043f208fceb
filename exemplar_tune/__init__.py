"""exemplar-tune: find and close the performance gap of AI-training GPU clusters."""

__version__ = "0.1.0"
