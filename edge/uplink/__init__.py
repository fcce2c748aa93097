"""Stage 6, uplink: crops to the cloud over gRPC, behind a breaker, spooled on disk."""
