"""The edge node daemon (`strata edge`): ingest, cross-camera batching, YOLO, results, uplink."""
