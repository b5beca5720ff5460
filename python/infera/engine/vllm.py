"""python -m infera.engine.vllm ... == infera engine vllm ..."""
from infera import exec_infera

if __name__ == "__main__":
    exec_infera(["engine", "vllm"])
