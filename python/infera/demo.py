"""python -m infera.demo ... == infera demo ..."""
from infera import exec_infera

if __name__ == "__main__":
    exec_infera(["demo"])
