"""python -m infera.engine.mock ... == infera engine mock ..."""
from infera import exec_infera

if __name__ == "__main__":
    exec_infera(["engine", "mock"])
