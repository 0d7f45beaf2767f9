"""`engram secrets …`: the keys that encrypt stored channel secrets (shared/infra/secretbox.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from ops.cli_support import fail, load_settings, transaction

secrets_app = typer.Typer(help="The keys that encrypt stored secrets (ENGRAM_SECRET_KEY).", no_args_is_help=True)


@secrets_app.command("rotate")
def rotate(
    new_key: Annotated[
        bool,
        typer.Option(
            "--new-key", help="Key file only: generate a new first key first, keeping the others for decryption"
        ),
    ] = False,
    drop_old: Annotated[
        bool,
        typer.Option("--drop-old", help="Key file only: after re-encrypting, keep only the first key in the file"),
    ] = False,
) -> None:
    """Re-encrypt every stored secret with the first key (plain-text ones too), so the others can be dropped.

    With ENGRAM_SECRET_KEY: put the new key first in it (in every process), run this, then remove the old
    key. With the data dir's key file: `--new-key` now, `--drop-old` once every process runs with it."""
    from shared.channels.connections import reseal_secrets
    from shared.infra.secretbox import (
        ENV_NAME,
        SecretKeyError,
        SecretKeyMissing,
        generate_key,
        key_file,
        keyring,
        write_key_file,
    )

    settings = load_settings()
    path = key_file(settings)
    if settings.secret_key is not None and (new_key or drop_old):
        fail(
            f"the keys come from {ENV_NAME}, which engram cannot edit: put a new key first there "
            "(`engram secrets generate-key`) in every process, run `engram secrets rotate`, then remove the old key",
            2,
        )
    try:
        ring = keyring(settings, create=new_key)
    except SecretKeyMissing as exc:
        fail(f"{exc}; or run `engram secrets rotate --new-key` to generate it here")
    except SecretKeyError as exc:
        fail(str(exc))
    if new_key:
        write_key_file(path, [generate_key(), *(key.decode() for key in ring.keys)])
        ring = keyring(settings)
    with transaction() as conn:
        try:
            count = reseal_secrets(conn, ring)
        except SecretKeyError as exc:
            fail(f"{exc}; nothing was re-encrypted")
    if drop_old and len(ring.keys) > 1:
        write_key_file(path, [ring.keys[0].decode()])
    kept = "; older keys dropped" if drop_old and len(ring.keys) > 1 else ""
    typer.echo(f"re-encrypted the secrets of {count} channel connection(s) with the first key of {ring.source}{kept}")


@secrets_app.command("generate-key")
def generate_key_command() -> None:
    """Print a new Fernet key (for ENGRAM_SECRET_KEY); stores nothing."""
    from shared.infra.secretbox import generate_key

    typer.echo(generate_key())
