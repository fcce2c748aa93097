"""Overload, in one home (see the package docstring once written)."""
