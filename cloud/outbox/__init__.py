"""The outbox: every sink (MQTT, webhooks) reads stored events from the store's database, in
commit order, with its own delivery position per camera (docs/sinks.md).

    store rows ─▶ source (rows -> OutboxEvent) ─▶ ledger (positions, leases) ─▶ worker ─▶ sink

At-least-once: a position moves only after the sink accepted the event, so a crash or a
broker outage re-sends, never skips; each message carries an idempotency key receivers
dedupe on. With several replicas on PostgreSQL a camera's delivery to a sink is leased by
one replica at a time (FOR UPDATE SKIP LOCKED); a dead replica's lease expires to another.
"""
