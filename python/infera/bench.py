"""python -m infera.bench ... == infera bench ..."""
from infera import exec_infera

if __name__ == "__main__":
    exec_infera(["bench"])
