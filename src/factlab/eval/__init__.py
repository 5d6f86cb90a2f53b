"""Evaluators: short-form QA (``shortform``), and more per paper as they land."""
