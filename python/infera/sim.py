"""python -m infera.sim ... == infera sim ..."""
from infera import exec_infera

if __name__ == "__main__":
    exec_infera(["sim"])
