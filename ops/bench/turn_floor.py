"""The least CPU a chat turn can cost with the parts engram is built from, over a no-op task's worker CPU
(issue 31's goal for `ops.bench.turns`: engram's CPU per turn ≤ 7 × that), measured in one run.

A lower bound, each part its cheapest form: the Celery round trip of a no-op task on the turns queue
(its worker CPU), two of the gateway's cheapest requests (`GET /healthz`; a turn needs its accept and a
read of the reply), one streamed reply through the official `anthropic` SDK from the stack's fake model
(client CPU), and embedding the turn's two messages as transcript units with the default embedder (every
message is vector-searchable within seconds). Postgres and everything else a real turn does count 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import anthropic
import httpx

from ops.bench.harness import BenchRun, bench_parser, cpu_seconds, emit, outline, ratio, rounded, run_main
from ops.bench.stack import LocalStack
from ops.bench.turns import noop_round_trips
from shared.embeddings.providers import embedder_from_settings
from shared.infra.config import Settings

USER_TEXT = "Turn 4. Please remember that my lucky number today is 304, and that my sister visits on Friday."
REPLY_TEXT = "Noted: your lucky number today is 304, and your sister visits on Friday. Anything else?"


def own_cpu_ms(fn: Callable[[], object], times: int) -> float:
    """This process's CPU milliseconds per call of `fn`, after a few unmeasured calls."""
    for _ in range(min(times, 20)):
        fn()
    started = time.process_time()
    for _ in range(times):
        fn()
    return (time.process_time() - started) * 1000 / times


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__name__, __doc__, keep=True)
    parser.add_argument("--tasks", type=int, default=400, help="no-op tasks (20 senders)")
    parser.add_argument("--calls", type=int, default=200, help="requests, model calls and embeddings per part")
    args = parser.parse_args(argv)
    with BenchRun(keep=args.keep) as run:
        stack = LocalStack(run.workdir("engram-floor-"), worker_concurrency=1)
        run.callback(stack.stop)
        stack.start()
        assert stack.gateway is not None and stack.worker is not None
        roots = {"gateway": stack.gateway.pid, "worker": stack.worker.pid}
        senders = 20
        noop_round_trips(stack.redis_url, senders, 2, 30)  # warm: the worker's first tasks import and connect
        before = cpu_seconds(roots)
        noop = noop_round_trips(stack.redis_url, senders, max(1, args.tasks // senders), 30)
        noop_ms = (cpu_seconds(roots)["worker"] - before["worker"]) * 1000 / max(1, len(noop.round_trips_ms))

        with httpx.Client(base_url=stack.url) as http:
            for _ in range(20):
                http.get("/healthz")
            before = cpu_seconds(roots)
            for _ in range(args.calls):
                http.get("/healthz").raise_for_status()
            healthz_ms = (cpu_seconds(roots)["gateway"] - before["gateway"]) * 1000 / args.calls

        llm_url = stack.gateway.env["ENGRAM_ANTHROPIC_BASE_URL"]
        model = anthropic.Anthropic(api_key="bench-key", base_url=llm_url)
        messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": USER_TEXT}]

        def streamed_reply() -> None:
            with model.messages.stream(model="fake", max_tokens=256, messages=messages) as stream:
                for _ in stream.text_stream:
                    pass

        sdk_ms = own_cpu_ms(streamed_reply, args.calls)
        embedder = embedder_from_settings(Settings())
        texts = iter([USER_TEXT, REPLY_TEXT] * (args.calls + 20))
        embed_ms = own_cpu_ms(lambda: embedder.embed([next(texts)]), args.calls)

    parts = {
        "noop_task_worker": rounded(noop_ms, 2),
        "gateway_two_requests": rounded(2 * healthz_ms, 2),
        "model_call_sdk": rounded(sdk_ms, 2),
        "embed_two_messages": rounded(2 * embed_ms, 2),
    }
    floor_ms = noop_ms + 2 * healthz_ms + sdk_ms + 2 * embed_ms
    summary = {
        "cpu_ms_per_turn_floor": rounded(floor_ms, 2),
        "floor_over_noop_worker_cpu": ratio(floor_ms, noop_ms),
        "embedding_over_noop_worker_cpu": ratio(2 * embed_ms, noop_ms),
        "parts_cpu_ms": parts,
        "noop_tasks": len(noop.round_trips_ms),
        "embedder": embedder.model,
    }
    emit(outline("engram's floor of CPU per turn (ms), a lower bound", summary), summary, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(partial(main, None)))
