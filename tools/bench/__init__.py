"""`strata bench [PART]`: every benchmark of the project (the table of parts is in cli.py)."""
