"""Stage 3, inference: decode, batch and run the detector (and its versions)."""
