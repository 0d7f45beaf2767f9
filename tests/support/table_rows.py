"""Every row of every table, by primary key: what an upgrade must keep."""

from __future__ import annotations

from shared.infra.db import Conn

Rows = dict[str, set[tuple[object, ...]]]

_PRIMARY_KEYS = """
    SELECT c.relname AS table_name,
           array_agg(a.attname::text ORDER BY array_position(i.indkey::int2[], a.attnum)) AS columns
      FROM pg_index i
      JOIN pg_class c ON c.oid = i.indrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
     WHERE i.indisprimary AND n.nspname = 'public'
     GROUP BY c.relname"""


def rows_by_key(conn: Conn) -> Rows:
    """{table: {primary key tuple}} for every table of the public schema (each must have a primary key)."""
    keys = {row["table_name"]: row["columns"] for row in conn.execute(_PRIMARY_KEYS).fetchall()}
    tables = [row["tablename"] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    without = sorted(set(tables) - set(keys))
    assert not without, f"tables without a primary key cannot be checked row by row: {without}"
    found: Rows = {}
    for table, columns in keys.items():
        listed = ", ".join(f'"{column}"' for column in columns)
        found[table] = {tuple(row.values()) for row in conn.execute(f'SELECT {listed} FROM "{table}"').fetchall()}
    return found
