"""python -m infera.server ... == infera server ..."""
from infera import exec_infera

if __name__ == "__main__":
    exec_infera(["server"])
