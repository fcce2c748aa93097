"""strata's tools: the `strata` command line, model building, distillation, demo and bench.

They sit above the tiers (they start and drive them) and may carry heavy optional
dependencies; the tiers never import them.
"""
