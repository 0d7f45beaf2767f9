"""What every benchmark under ops/bench shares: percentiles and summaries, the `--json` convention (the last
line of stdout is one JSON object), the error exit, the run's cleanup and process measurements."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import psutil

from ops.bench.stack import BenchError, LocalStack, Terminated, raise_on_sigterm, stop_quietly


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None when nothing was measured."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def distribution(
    values: Sequence[float], quantiles: Iterable[float] = (50, 95, 99), digits: int = 1
) -> dict[str, float | int | None]:
    summary: dict[str, float | int | None] = {f"p{q:g}": rounded(percentile(values, q), digits) for q in quantiles}
    return summary | {"max": rounded(max(values), digits) if values else None, "n": len(values)}


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def ratio(numerator: float | None, denominator: float | None, digits: int = 2) -> float | None:
    return None if numerator is None or not denominator else round(numerator / denominator, digits)


def bench_parser(module: str, doc: str | None, keep: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=(doc or "").split("\n")[0] or None)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object, the last line")
    if keep:
        parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, data)")
    return parser


def env_setting(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.startswith("ENGRAM_"):
        raise argparse.ArgumentTypeError(f"--env takes ENGRAM_KEY=VALUE, not {item!r}")
    return key, value


def emit(report: str, summary: Mapping[str, Any], as_json: bool) -> None:
    if report:
        print(report, flush=True)
    if as_json:
        print(json.dumps(summary, separators=(",", ":"), default=str), flush=True)


def outline(title: str, summary: Mapping[str, Any], indent: str = "  ") -> str:
    """A JSON summary as the human report: the title, then one line per figure, sections indented under
    their name (a section of plain figures, or a list of them, on one line each)."""

    def lines(value: Mapping[str, Any], depth: int) -> list[str]:
        out: list[str] = []
        for key, item in value.items():
            label = f"{indent * depth}{str(key).replace('_', ' ')}"
            if isinstance(item, Mapping) and item and any(isinstance(v, Mapping | list) for v in item.values()):
                out += [f"{label}:", *lines(item, depth + 1)]
            elif isinstance(item, Mapping):
                out.append(f"{label}: " + ", ".join(f"{k} {_figure(v)}" for k, v in item.items()))
            elif isinstance(item, list) and item and all(isinstance(v, Mapping) for v in item):
                out += [
                    f"{label}:",
                    *(f"{indent * (depth + 1)}- " + ", ".join(f"{k} {_figure(v)}" for k, v in v.items()) for v in item),
                ]
            else:
                out.append(f"{label}: {_figure(item)}")
        return out

    return "\n".join([title, *lines(summary, 1)])


def _figure(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(_figure(v) for v in value) + "]"
    return str(value)


def run_main(main: Callable[[], int], error_code: int = 1) -> int:
    """main(), with a BenchError as `error: …` on stderr and `error_code`, Ctrl-C or SIGTERM as 130."""
    try:
        return main()
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return error_code
    except KeyboardInterrupt as exc:
        print(f"\n{'SIGTERM' if isinstance(exc, Terminated) else 'interrupted'}: stopped", file=sys.stderr)
        return 130


class BenchRun(contextlib.ExitStack):
    """One run's lifetime: SIGTERM raises `Terminated` inside it; on exit, what was registered is undone in
    reverse order with SIGINT and SIGTERM ignored. Workdirs are removed unless `keep` (or a BenchError)."""

    def __init__(self, keep: bool = False) -> None:
        super().__init__()
        self.keep = keep
        self._saved: dict[signal.Signals, Any] = {}

    def __enter__(self) -> BenchRun:
        super().__enter__()
        self._saved[signal.SIGTERM] = signal.signal(signal.SIGTERM, raise_on_sigterm)
        return self

    def workdir(self, prefix: str, what: str = "logs and data") -> Path:
        path = Path(tempfile.mkdtemp(prefix=prefix))
        path.chmod(0o755)  # the embedded Postgres runs unprivileged when we are root: it must reach its data dir
        self.callback(self._remove_workdir, path, what)
        return path

    def database(self, url: str | None, prefix: str) -> str:
        return url or self._postgres(self.workdir(prefix, what="data"))

    def _postgres(self, workdir: Path) -> str:
        from ops.embedded import EmbeddedPostgres

        server = EmbeddedPostgres(workdir / "postgres")
        self.callback(stop_quietly, server)
        print(f"starting an embedded Postgres in {workdir} ...", file=sys.stderr, flush=True)
        return server.start()

    def services(self, prefix: str, env: Mapping[str, str]) -> str:
        """For a benchmark that runs engram in-process: an embedded Postgres and valkey, their URLs, a data
        dir and `env` in os.environ (engram's settings); returns the database URL."""
        from ops.embedded import EmbeddedRedis

        workdir = self.workdir(prefix)
        database_url = self._postgres(workdir)
        redis = EmbeddedRedis(workdir / "valkey")
        self.callback(stop_quietly, redis)
        urls = {"ENGRAM_DATABASE_URL": database_url, "ENGRAM_REDIS_URL": redis.start()}
        os.environ.update({**urls, "ENGRAM_DATA_DIR": str(workdir / "data"), **env})
        return database_url

    def stack(self, prefix: str, *args: Any, **options: Any) -> tuple[LocalStack, str]:
        """A private stack (LocalStack's arguments) in a new workdir, stopped with the run; its API key."""
        stack = LocalStack(self.workdir(prefix), *args, **options)
        self.callback(stack.stop)
        print(f"starting a private stack in {stack.workdir} ...", file=sys.stderr, flush=True)
        return stack, stack.start()

    def _remove_workdir(self, path: Path, what: str) -> None:
        if self.keep:
            print(f"{what} kept in {path}", file=sys.stderr)
        else:
            shutil.rmtree(path, ignore_errors=True)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        # Never swallows the exception (run_main makes it an exit code); `Literal[False]` tells mypy so.
        if isinstance(exc, BenchError):
            self.keep = True
        self._saved.setdefault(signal.SIGINT, signal.getsignal(signal.SIGINT))
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        try:
            super().__exit__(exc_type, exc, tb)
            return False
        finally:
            for signum, handler in self._saved.items():
                signal.signal(signum, handler)


def megabytes(value: int | None) -> float | None:
    return None if value is None else rounded(value / 2**20)


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@dataclass
class Peak:
    rss: int = 0
    pss: int | None = None
    processes: int = 0

    def figures(self) -> dict[str, float | int | None]:
        return {"peak_rss_mb": megabytes(self.rss), "peak_pss_mb": megabytes(self.pss), "processes": self.processes}


class MemorySampler(threading.Thread):
    """Peak RSS (and PSS unless `pss=False`: slow to read) of process trees (single processes with
    `tree=False`), sampled every `interval` s and on entry and exit."""

    def __init__(self, roots: Mapping[str, int], interval: float = 0.1, tree: bool = True, pss: bool = True) -> None:
        super().__init__(name="memory-sampler", daemon=True)
        self.roots = {name: psutil.Process(pid) for name, pid in roots.items()}
        self.peaks = {name: Peak() for name in roots}
        self.interval = interval
        self.tree = tree
        self.pss = pss
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        for name, root in self.roots.items():
            rss, pss, count = 0, 0, 0
            pss_known = self.pss
            for proc in _tree(root) if self.tree else [root]:
                try:
                    rss += proc.memory_info().rss
                    count += 1
                    if pss_known:
                        pss += getattr(proc.memory_full_info(), "pss", 0)
                except (psutil.NoSuchProcess, psutil.ZombieProcess):
                    continue
                except psutil.AccessDenied:
                    pss_known = False
            peak = self.peaks[name]
            if rss > peak.rss:
                peak.rss, peak.processes = rss, count
            if pss_known and count:
                peak.pss = max(peak.pss or 0, pss)

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(2)

    def __enter__(self) -> MemorySampler:
        self.sample()
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
        self.sample()  # in case the peak came after the last tick


def cpu_seconds(roots: Mapping[str, int], own: str | None = None) -> dict[str, float]:
    """CPU seconds (user + system) of each process tree: the root, its live descendants and its reaped
    children; the root named `own` (the benchmark's process) counts alone; a tree that is gone counts 0."""
    out: dict[str, float] = {}
    for name, pid in roots.items():
        out[name] = 0.0
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            times = root.cpu_times()
            out[name] += times.user + times.system
            if name != own:  # its reaped children, then its live descendants
                out[name] += times.children_user + times.children_system
                for proc in root.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        out[name] += sum(proc.cpu_times()[:2])
    return out
