"""Numbered PostgreSQL migrations (NNNN_name.sql), applied in order by `PostgresStore.migrate`."""
