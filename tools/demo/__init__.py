"""`strata demo`: the three tiers as separate processes on loopback, fed a clip, with a report.

Shared code never imports a tier: the demo talks to the daemons only through processes,
sockets (ZeroMQ, gRPC, Prometheus HTTP) and the protobuf contracts.
"""
