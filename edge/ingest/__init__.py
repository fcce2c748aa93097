"""Stage 1, ingest: frames from device agents are checked, acknowledged and handed to flow."""
