"""Slack channel benchmark: signed Events API requests (a share sent twice, as Slack retries) against a private
stack replying to an in-process fake Slack: webhook ack and event -> reply latency, one reply each."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from ops.bench.harness import BenchRun, bench_parser, distribution, emit, outline, run_main
from ops.bench.stack import BenchError, up_workers
from ops.fake_channels import FakeChannels
from shared.channels.slack import sign

SIGNING_SECRET = "bench-signing-secret"
BOT_TOKEN = "xoxb-bench-token"
SLACK_ACK_LIMIT_MS = 3000.0
_TOKEN = re.compile(r"bench-(\d+)-(\d+)")


@dataclass
class Phase:
    rate: float
    seconds: float
    sent_at: dict[int, float] = field(default_factory=dict)  # event number → monotonic send start
    acks_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    duplicates_sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _payload(phase_no: int, n: int, users: int) -> bytes:
    user = n % users
    event = {
        "type": "event_callback",
        "team_id": "TBENCH",
        "event_id": f"Ev{phase_no}x{n}",
        "event_time": int(time.time()),
        "authorizations": [{"user_id": "UBOT", "is_bot": True}],
        "event": {
            "type": "message",
            "channel_type": "im",
            "user": f"U{user:04d}",
            "channel": f"D{user:04d}",
            "text": f"hello bench-{phase_no}-{n}",
            "ts": f"{int(time.time())}.{n:06d}",
        },
    }
    return json.dumps(event).encode()


def run_phase(phase: Phase, phase_no: int, url: str, users: int, duplicate_share: float, threads: int) -> None:
    endpoint = f"{url}/v1/channels/slack/default/events"
    local = threading.local()
    rng = random.Random(phase_no)

    def fire(n: int, body: bytes, retry: bool) -> None:
        if not hasattr(local, "client"):
            local.client = httpx.Client(timeout=30)
        if not retry:
            with phase.lock:
                phase.sent_at[n] = time.monotonic()
        stamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": sign(SIGNING_SECRET, stamp, body),
        }
        if retry:
            headers["X-Slack-Retry-Num"] = "1"
        began = time.monotonic()
        try:
            status = local.client.post(endpoint, content=body, headers=headers).status_code
            error = None if status == 200 else f"HTTP {status}"
        except httpx.HTTPError as exc:
            error = type(exc).__name__
        with phase.lock:
            phase.acks_ms.append((time.monotonic() - began) * 1000)
            if error:
                phase.errors.append(error)

    total = max(1, int(phase.rate * phase.seconds))
    timers: list[threading.Timer] = []
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for n in range(total):
            due = start + n / phase.rate
            time.sleep(max(0.0, due - time.monotonic()))
            body = _payload(phase_no, n, users)
            pool.submit(fire, n, body, False)
            if rng.random() < duplicate_share:
                phase.duplicates_sent += 1
                retry_due = due + rng.uniform(0.05, 1.0)  # Slack retries after its timeout, in parallel
                timer = threading.Timer(max(0.0, retry_due - time.monotonic()), pool.submit, (fire, n, body, True))
                timer.start()
                timers.append(timer)
        for timer in timers:  # every retry is submitted before the pool closes
            timer.join()


def replies(fake: FakeChannels, phase_no: int) -> dict[int, list[float]]:
    """Event number → arrival times of its chat.postMessage calls."""
    found: dict[int, list[float]] = {}
    for call in fake.slack.calls("chat.postMessage"):
        match = _TOKEN.search(str(call.body.get("text")))
        if match and int(match.group(1)) == phase_no:
            found.setdefault(int(match.group(2)), []).append(call.at)
    return found


def wait_for_replies(fake: FakeChannels, phase: Phase, phase_no: int, timeout: float, quiet: float = 3.0) -> None:
    """Until every event has its reply, then `quiet` seconds without a new post (a duplicate would come then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(replies(fake, phase_no)) < len(phase.sent_at):
        time.sleep(0.2)
    settled_at, seen = time.monotonic(), len(fake.slack.calls("chat.postMessage"))
    while time.monotonic() - settled_at < quiet and time.monotonic() < deadline:
        time.sleep(0.2)
        now_seen = len(fake.slack.calls("chat.postMessage"))
        if now_seen != seen:
            settled_at, seen = time.monotonic(), now_seen


def summarize(phase: Phase, fake: FakeChannels, phase_no: int) -> dict[str, Any]:
    posted = replies(fake, phase_no)
    e2e = [(min(times) - phase.sent_at[n]) * 1000 for n, times in posted.items() if n in phase.sent_at]
    unique = len(phase.sent_at)
    return {
        "rate_per_s": round(phase.rate, 2),
        "seconds": phase.seconds,
        "events": unique,
        "duplicates_sent": phase.duplicates_sent,
        "requests": unique + phase.duplicates_sent,
        "request_errors": len(phase.errors),
        "replies_posted": sum(len(times) for times in posted.values()),
        "events_answered": len(posted),
        "events_answered_twice": sum(1 for times in posted.values() if len(times) > 1),
        "ack_ms": distribution(phase.acks_ms, (50, 99)),
        "acks_over_3s": sum(1 for ms in phase.acks_ms if ms >= SLACK_ACK_LIMIT_MS),
        "event_to_reply_ms": distribution(e2e, (50, 99)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.channels", __doc__, keep=True)
    parser.add_argument("--rate", type=float, default=5.0, help="events per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to send them")
    parser.add_argument("--users", type=int, default=40, help="distinct Slack users (one DM session each)")
    parser.add_argument("--duplicate-share", type=float, default=0.3, help="share of events sent twice")
    parser.add_argument("--threads", type=int, default=64, help="client threads sending requests")
    parser.add_argument("--turn-concurrency", type=int, default=2, help="processes of the turns+channels worker")
    parser.add_argument("--reply-timeout", type=float, default=300.0, help="wait this long for every reply")
    args = parser.parse_args(argv)
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    with BenchRun(keep=args.keep) as run:
        fake = FakeChannels().start()
        run.callback(fake.stop)
        fake.slack_token = BOT_TOKEN
        env = {
            "ENGRAM_SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "ENGRAM_SLACK_BOT_TOKEN": BOT_TOKEN,
            "ENGRAM_SLACK_API_URL": fake.slack_api_url,
            "ENGRAM_AUTO_MEMORY": "false",
        }
        stack, _ = run.stack("engram-bench-channels-", up_workers(args.turn_concurrency), env=env)
        # Warm-up: imports, pools and the first prompt of each pool process, not measured.
        warm = Phase(rate=2.0, seconds=2.0)
        run_phase(warm, 0, stack.url, args.users, 0.0, 4)
        wait_for_replies(fake, warm, 0, args.reply_timeout, quiet=0.5)
        if len(replies(fake, 0)) < len(warm.sent_at):
            raise BenchError(f"warm-up events were not answered; worker log:\n{stack.workers[0].tail()}")

        sent = Phase(rate=args.rate, seconds=args.seconds)
        run_phase(sent, 1, stack.url, args.users, args.duplicate_share, args.threads)
        wait_for_replies(fake, sent, 1, args.reply_timeout)
        stack.check_alive()
        summary = summarize(sent, fake, 1)
        emit(outline(f"engram Slack channel benchmark ({os.cpu_count()} CPUs)", summary), summary, args.json)
        exact = summary["replies_posted"] == summary["events"] == summary["events_answered"]
        run.keep = run.keep or not exact
        return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
