"""The Analytics gRPC service: handlers, each item kind's checks and acks, the watch fan-out."""
