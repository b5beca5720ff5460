"""Engine entry points: python -m infera.engine.vllm|sglang|mock."""
