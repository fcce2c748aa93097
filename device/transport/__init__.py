"""Frames to the edge: payload encoding, the sender, outbox and disk spool, routing."""
