"""Secrets at rest: values engram must read back (channel bot tokens, signing and webhook secrets) are
stored as Fernet tokens (`cryptography`'s AES-128-CBC + HMAC-SHA256), never as the value itself.

The keys come from `ENGRAM_SECRET_KEY` (one or more comma-separated Fernet keys) or, when it is unset,
from `<data_dir>/secret-key` (one key a line, mode 600), which `engram up` generates on first start.
The first key encrypts, every key decrypts (`MultiFernet`), so a key is rotated by putting a new one
first, re-encrypting (`engram secrets rotate`), then dropping the old one. The key file is re-read when
it changes, so processes pick up a rotation without a restart.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from pydantic import SecretStr

ENV_NAME = "ENGRAM_SECRET_KEY"
_FILE_HEADER = (
    "# engram's secret keys (Fernet), one a line: the first encrypts, all decrypt.\n"
    "# Keep this file with your backups: without it the stored channel secrets cannot be read.\n"
)


class KeySettings(Protocol):
    """What this module reads of shared.infra.config.Settings (which imports it to check ENGRAM_SECRET_KEY)."""

    @property
    def secret_key(self) -> SecretStr | None: ...

    @property
    def data_dir(self) -> Path: ...


class SecretKeyError(RuntimeError):
    """A malformed key, or stored secrets that none of the keys decrypts. The message says what to do
    and never holds a secret or a key."""


class SecretKeyMissing(SecretKeyError):
    """Neither ENGRAM_SECRET_KEY nor the data dir's key file gives a key."""


def parse_keys(text: str, source: str) -> tuple[bytes, ...]:
    """The Fernet keys in `text` (comma-, space- or line-separated; `#` starts a comment line)."""
    parts = [
        part.strip()
        for line in text.splitlines()
        if not line.strip().startswith("#")
        for part in line.replace(",", " ").split()
    ]
    if not parts:
        raise SecretKeyError(f"{source} holds no key")
    for number, part in enumerate(parts, 1):
        try:
            Fernet(part)
        except ValueError:
            raise SecretKeyError(
                f"{source}: key {number} is not a Fernet key (44 characters of URL-safe base64; "
                "`engram secrets generate-key` prints a new one)"
            ) from None
    return tuple(part.encode() for part in parts)


def generate_key() -> str:
    return Fernet.generate_key().decode()


@dataclass(frozen=True)
class KeyRing:
    keys: tuple[bytes, ...]
    source: str  # "ENGRAM_SECRET_KEY" or the key file's path: where an error tells the operator to look

    @property
    def _fernet(self) -> MultiFernet:
        return MultiFernet([Fernet(key) for key in self.keys])

    def seal(self, value: str) -> str:
        """A Fernet token (ASCII) of `value`, under the first key."""
        return self._fernet.encrypt(value.encode()).decode()

    def open(self, token: str) -> str:
        """The value; InvalidToken when no key decrypts it (or it was altered)."""
        return self._fernet.decrypt(token.encode()).decode()

    def reseal(self, token: str) -> str:
        """The same value under the first key (MultiFernet.rotate); InvalidToken when no key decrypts it."""
        return self._fernet.rotate(token.encode()).decode()


def key_file(settings: KeySettings) -> Path:
    return settings.data_dir / "secret-key"


_lock = threading.Lock()
_file_cache: dict[Path, tuple[tuple[int, int, int], KeyRing]] = {}


def keyring(settings: KeySettings, *, create: bool = False) -> KeyRing:
    """The keys to use: ENGRAM_SECRET_KEY, else the data dir's key file (generated when `create` and absent).

    SecretKeyMissing when there is neither; SecretKeyError when a key is malformed."""
    if settings.secret_key is not None:
        return KeyRing(parse_keys(settings.secret_key.get_secret_value(), ENV_NAME), ENV_NAME)
    path = key_file(settings)
    with _lock:
        try:
            stat = path.stat()
        except FileNotFoundError:
            if not create:
                raise SecretKeyMissing(
                    f"no secret key: {ENV_NAME} is unset and {path} does not exist. `engram up` generates that "
                    f"file on first start; a deployment whose processes do not share a data dir sets {ENV_NAME} "
                    "(the same value in every process; `engram secrets generate-key` prints one)"
                ) from None
            _create_key_file(path)
            stat = path.stat()
        version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        cached = _file_cache.get(path)
        if cached is not None and cached[0] == version:
            return cached[1]
        ring = KeyRing(parse_keys(path.read_text(), str(path)), str(path))
        _file_cache[path] = (version, ring)
        return ring


def write_key_file(path: Path, keys: list[str]) -> None:
    """Replace the key file atomically (mode 600): readers see the old keys or the new, never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _write_private(temporary, _FILE_HEADER + "".join(key + "\n" for key in keys))
    os.replace(temporary, path)


def _create_key_file(path: Path) -> None:
    """A new key file with one fresh key, unless another process made one first (then that one stays)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _write_private(temporary, _FILE_HEADER + generate_key() + "\n")
    try:
        os.link(temporary, path)  # fails if the file exists: the first process's key wins
    except FileExistsError:
        pass
    finally:
        temporary.unlink(missing_ok=True)


def _write_private(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    path.chmod(0o600)


__all__ = [
    "ENV_NAME",
    "InvalidToken",
    "KeyRing",
    "SecretKeyError",
    "SecretKeyMissing",
    "generate_key",
    "key_file",
    "keyring",
    "parse_keys",
    "write_key_file",
]
