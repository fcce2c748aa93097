"""The `strata models` tools: build, import, quantize, engine, promote, bench.

They write into a model repository that the tiers read through `strata.shared.models`.
"""
