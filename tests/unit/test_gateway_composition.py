"""The gateway's composition root (ops/gateway.py): the app gets the Celery dispatcher, and building it loads
no Celery (the Celery app reads the settings and resolves the broker when made: it loads on first use)."""

from __future__ import annotations

import subprocess
import sys

_BUILD = """
import sys
from ops.gateway import create_app
from shared.queueing.dispatch import get_dispatcher

create_app()
celery = ("celery", "kombu", "workers.app", "workers.dispatch")
loaded = sorted(m for m in sys.modules if m in celery or m.split(".")[0] in celery)
print(type(get_dispatcher()).__name__, loaded)
"""


def test_the_gateway_is_built_with_the_celery_dispatcher_without_loading_celery() -> None:
    # A fresh interpreter: this one may have loaded Celery for other tests.
    done = subprocess.run([sys.executable, "-c", _BUILD], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "CeleryDispatcher []"
