"""One gateway of `engram up --cluster`: uvicorn serving the API on its own SO_REUSEPORT socket.

Every gateway binds ENGRAM_HOST:ENGRAM_PORT with SO_REUSEPORT, so the kernel spreads new connections
over the gateways (by a hash of the client's address and port) and stops sending any to a gateway whose
process died (its socket died with it). Why not the alternatives: one listening socket shared by the
gateways sends nearly every connection to whichever asyncio loop wakes first (it accepts a whole burst),
so the second gateway idles; `uvicorn --workers` puts the gateways under a manager process outside the
stack's supervisor; a reverse proxy adds a hop and a dependency for a single machine (docker-compose and
Kubernetes do use one: HAProxy, the Service).

    python -m ops.cluster_gateway        # ENGRAM_HOST / ENGRAM_PORT from the settings
"""

from __future__ import annotations

import socket

import uvicorn

from ops.process_commands import GATEWAY_APP, GATEWAY_KEEP_ALIVE_SECONDS
from shared.infra.config import get_settings


def reuseport_socket(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    sock.listen(2048)
    return sock


def main() -> None:
    settings = get_settings()
    config = uvicorn.Config(GATEWAY_APP, factory=True, access_log=False, timeout_keep_alive=GATEWAY_KEEP_ALIVE_SECONDS)
    # Build the app first, join the port after: the kernel hands a bound socket its share of new
    # connections at once, and they would wait out the imports of a (re)starting gateway.
    config.load()
    sock = reuseport_socket(settings.host, settings.port)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":  # pragma: no cover - started by `engram up --cluster`
    main()
