"""Expand, then contract: a new migration that drops or reshapes what the previous release uses must say it is
a contract step (tests/support/migration_rules.py, docs/operations/runbooks/upgrade.md)."""

from __future__ import annotations

import pytest

from shared.infra.migrate import available_migrations
from tests.support.migration_rules import CONTRACT_MARKER, RULE_FROM, contract_steps, is_contract


def test_new_migrations_only_expand_unless_marked_as_a_contract_step() -> None:
    offenders = {
        f"{m.version:04d}_{m.name}": steps
        for m in available_migrations()
        if m.version >= RULE_FROM and not is_contract(m.sql) and (steps := contract_steps(m.sql))
    }
    assert not offenders, (
        f"these migrations break the release before them during a rolling upgrade: {offenders}. Add instead "
        f"(expand), and drop or rename a release later in a migration marked '{CONTRACT_MARKER}' "
        "(docs/operations/runbooks/upgrade.md)"
    )


def test_the_check_sees_the_contract_steps_of_a_shipped_migration() -> None:
    (units,) = [m for m in available_migrations() if m.version == 15]
    steps = contract_steps(units.sql)
    assert "drops column session_messages.embedded_at" in steps
    assert "drops column session_messages.search_tsv" in steps
    # Its indexes dropped for good count too; the trigger it drops and creates again does not.
    assert "drops index session_messages_tsv_idx" in steps and not any("trigger" in s for s in steps)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("ALTER TABLE turns DROP COLUMN IF EXISTS reply", ["drops column turns.reply"]),
        ("ALTER TABLE turns RENAME COLUMN reply TO answer", ["renames turns.reply"]),
        ("ALTER TABLE turns RENAME TO chat_turns", ["renames turns"]),
        ("DROP TABLE IF EXISTS documents", ["drops table documents"]),
        ("ALTER TABLE turns ALTER COLUMN attempts TYPE bigint", ["changes the type of turns.attempts"]),
        (
            "ALTER TABLE turns ALTER COLUMN reply SET NOT NULL",
            ["makes turns.reply NOT NULL (older writers may leave it out)"],
        ),
        (
            "ALTER TABLE turns ADD COLUMN lane text NOT NULL",
            ["adds turns.lane NOT NULL without a default (older writers do not fill it)"],
        ),
        ("DROP FUNCTION engram_transcript_line(text, text, text)", ["drops function engram_transcript_line"]),
    ],
)
def test_what_breaks_the_previous_release_is_named(sql: str, expected: list[str]) -> None:
    assert contract_steps(sql) == expected


def test_expanding_is_not_a_contract_step() -> None:
    sql = """
        CREATE TABLE IF NOT EXISTS notes (id bigserial PRIMARY KEY, body text NOT NULL);
        ALTER TABLE turns ADD COLUMN IF NOT EXISTS lane text NOT NULL DEFAULT 'chat';
        ALTER TABLE turns ADD COLUMN IF NOT EXISTS note_id bigint REFERENCES notes(id);
        ALTER TABLE turns ALTER COLUMN reply DROP NOT NULL;
        DROP INDEX IF EXISTS notes_body_idx;
        CREATE INDEX notes_body_idx ON notes (body);
        CREATE TEMPORARY TABLE scratch AS SELECT id FROM notes;
        DROP TABLE scratch;
        CREATE OR REPLACE FUNCTION engram_note(p bigint) RETURNS text LANGUAGE sql AS $$ SELECT body FROM notes $$;
    """
    assert contract_steps(sql) == []


def test_the_marker_is_a_line_of_its_own() -> None:
    assert is_contract(f"-- Drops turns.reply, unused since 0020's release.\n{CONTRACT_MARKER}\nALTER TABLE t DROP x;")
    assert not is_contract(f"-- do not write {CONTRACT_MARKER} here\nALTER TABLE t DROP x;")
