"""The gateway's composition root: the HTTP app (api/) wired to the Celery queues (workers/).

api/ never imports workers/ (the import-linter contracts in pyproject.toml): it sends work through
shared.queueing.dispatch.Dispatcher, and this module hands it the Celery implementation. Every process that serves
the gateway builds it here: `uvicorn ops.gateway:create_app --factory` (ops/Dockerfile, docker-compose.yml,
ops/k8s, `engram up`, the tests). Nothing here loads the Celery app: it loads on the first publish.
"""

from __future__ import annotations

from fastapi import FastAPI

from api.app import create_app as create_gateway
from workers.dispatcher import CeleryDispatcher


def create_app() -> FastAPI:
    return create_gateway(CeleryDispatcher())
