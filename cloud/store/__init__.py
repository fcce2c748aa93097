"""The event store: the rows of each table, SQLite and PostgreSQL back ends, retention."""
