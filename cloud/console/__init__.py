"""The web console: server-rendered pages and JSON over the event store (docs/console.md).

`strata cloud` serves it beside gRPC on the same event loop (cloud.http), so live pages
subscribe to the same WatchHub as WatchEvents streams and read the store through the same
executor.
"""
