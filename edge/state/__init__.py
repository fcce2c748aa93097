"""Beside the stages, state: checkpoints and the settle journal."""
