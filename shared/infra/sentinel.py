"""Redis Sentinel addresses: `ENGRAM_REDIS_SENTINELS` (`host:port,host:port`) or a kombu-style
`ENGRAM_REDIS_URL` (`sentinel://host:port;sentinel://host:port`). Every client asks the sentinels
where the primary of `ENGRAM_REDIS_SENTINEL_SERVICE` is, and asks again after a failover."""

from __future__ import annotations

from dataclasses import dataclass

SENTINEL_SCHEME = "sentinel://"
DEFAULT_SENTINEL_PORT = 26379


class SentinelAddressError(ValueError):
    pass


@dataclass(frozen=True)
class SentinelTarget:
    sentinels: tuple[tuple[str, int], ...]
    service: str

    @property
    def broker_url(self) -> str:
        """kombu's Sentinel transport URL: one `sentinel://` per sentinel, `;`-separated."""
        return ";".join(f"{SENTINEL_SCHEME}{host}:{port}" for host, port in self.sentinels)


def is_sentinel_url(url: str | None) -> bool:
    return bool(url) and str(url).startswith(SENTINEL_SCHEME)


def _address(entry: str, source: str) -> tuple[str, int]:
    text = entry.strip()
    if text.startswith(SENTINEL_SCHEME):
        text = text[len(SENTINEL_SCHEME) :]
    text = text.split("/", 1)[0]  # a database path (kombu allows one) says nothing about where the sentinel is
    if "@" in text:
        raise SentinelAddressError(f"{source}: {entry.strip()!r}: sentinel passwords are not supported")
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = text, str(DEFAULT_SENTINEL_PORT)
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise SentinelAddressError(f"{source}: {entry.strip()!r} is not host:port")
    return host, int(port_text)


def parse_sentinels(text: str, source: str = "ENGRAM_REDIS_SENTINELS") -> tuple[tuple[str, int], ...]:
    """The (host, port) of each sentinel in a `,`- or `;`-separated list; ValueError naming the bad entry."""
    entries = [entry for entry in text.replace(";", ",").split(",") if entry.strip()]
    if not entries:
        raise SentinelAddressError(f"{source}: no sentinel address given")
    return tuple(_address(entry, source) for entry in entries)
