"""Rules on track paths: zones, directional lines, dwell, stationary -> track events."""
