"""infera's Python entry points: thin shims so that the documented commands
(`python -m infera.server ...`, `python -m infera.engine.vllm|sglang|mock ...`) run verbatim.
Each one execs the C++ `infera` binary with the same arguments. Standard library only."""

import os
import shutil
import sys

__all__ = ["find_binary", "exec_infera"]


def find_binary():
    """The infera binary: $INFERA_BIN, else `infera` on PATH, else this checkout's build."""
    explicit = os.environ.get("INFERA_BIN")
    if explicit:
        return explicit
    on_path = shutil.which("infera")
    if on_path:
        return on_path
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for preset in ("release", "dev", "asan"):
        candidate = os.path.join(root, "build", preset, "bin", "infera")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def exec_infera(subcommand, argv=None):
    """Replaces this process with `infera <subcommand...> <argv>`."""
    args = list(sys.argv[1:] if argv is None else argv)
    binary = find_binary()
    if binary is None:
        sys.stderr.write(
            "infera: the infera binary was not found (set INFERA_BIN, put it on PATH, "
            "or build it with scripts/build release)\n")
        sys.exit(127)
    os.execv(binary, [binary] + list(subcommand) + args)
