"""Capture: sources, decoding, decoded frames and the packet ring clips are cut from."""
