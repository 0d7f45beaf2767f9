"""Embedding models behind shared.embeddings.base.Embedder: OpenAI's embeddings endpoint or a compatible server
(openai_embeddings.py) and the bundled MiniLM on torch (minilm_torch.py) or onnxruntime (minilm_onnx.py)."""
