"""An import-only stand-in for vLLM, on the path of the live suite's Mixture-of-Experts servers.

SGLang 0.5.23's `RotaryEmbedding.__init__` imports `vllm._custom_ops.rotary_embedding` on a
CPU device without SGLang's CPU engine, though its forward there is plain torch
(`forward_native`) and never calls it.
"""
