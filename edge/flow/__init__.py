"""Stage 2, flow: which frames the node holds, their acks, credits and per-camera queues."""
