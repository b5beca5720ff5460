"""python -m infera.engine.sglang ... == infera engine sglang ..."""
from infera import exec_infera

if __name__ == "__main__":
    exec_infera(["engine", "sglang"])
