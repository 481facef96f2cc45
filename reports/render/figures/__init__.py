"""Figures (matplotlib ``Figure`` objects, seaborn styles; plotting imports are lazy)."""
