"""python -m infera.tokenize ... == infera tokenize ..."""
from infera import exec_infera

if __name__ == "__main__":
    exec_infera(["tokenize"])
