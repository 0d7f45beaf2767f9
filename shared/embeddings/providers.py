"""Embedding models: the bundled MiniLM (offline; on onnxruntime by default, or torch) and OpenAI or any
OpenAI-compatible endpoint. `embedder_from_settings` picks one; each is an adapter of its own
(shared/adapters/embeddings/: minilm_torch.py, minilm_onnx.py, openai_embeddings.py) and the names callers
use are re-exported here.

Every embedder splits its input itself (OpenAI into requests of at most `batch_size` texts, torch into
batches of that size, onnxruntime into one model run per text), so `embed()` accepts any number of
texts. `shared.embeddings.cache.embed_texts` additionally slices the cache misses by the configured
batch size, which bounds how much work one call does between cache writes. Only OpenAI retries: the
local model has nothing transient to retry.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from shared.adapters.embeddings.minilm_onnx import (
    ONNX_BACKENDS,
    OnnxLocalEmbedder,
    OnnxModelFiles,
    export_local_onnx,
    int8_path,
    local_tokenizer,
    onnx_cache_dir,
    onnx_cache_name,
    onnx_model_files,
    onnx_model_path,
    prepare_local_onnx,
    quantize_local_onnx,
)
from shared.adapters.embeddings.minilm_torch import LocalEmbedder, local_model
from shared.adapters.embeddings.openai_embeddings import DEFAULT_OPENAI_MODEL, KNOWN_DIMENSIONS, OpenAIEmbedder
from shared.embeddings.base import LOCAL_DIMENSION, LOCAL_INT8_MODEL, LOCAL_MODEL, Embedder, EmbeddingError

if TYPE_CHECKING:
    from shared.infra.config import Settings

__all__ = [
    "DEFAULT_OPENAI_MODEL",
    "KNOWN_DIMENSIONS",
    "LOCAL_DIMENSION",
    "LOCAL_INT8_MODEL",
    "LOCAL_MODEL",
    "ONNX_BACKENDS",
    "Embedder",
    "EmbeddingError",
    "LocalEmbedder",
    "OnnxLocalEmbedder",
    "OnnxModelFiles",
    "OpenAIEmbedder",
    "embedder_from_settings",
    "export_local_onnx",
    "int8_path",
    "local_model",
    "local_tokenizer",
    "onnx_cache_dir",
    "onnx_cache_name",
    "onnx_model_files",
    "onnx_model_path",
    "prepare_local_onnx",
    "quantize_local_onnx",
]


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
