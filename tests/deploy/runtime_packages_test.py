#!/usr/bin/python3
"""scripts/packages/runtime.txt holds every package the infera binary needs at run time.

Usage: runtime_packages_test.py INFERA_BINARY

deploy/Dockerfile's runtime stage installs runtime.txt and nothing else, so a library that
`ldd INFERA_BINARY` resolves must come from a package of that list:
- a library the binary itself links (DT_NEEDED) must be in a package the list names;
- a library one of those pulls in must be in a listed package or in one of their Depends
  (recursively, as apt resolves them when it installs the list);
- every listed package must exist in apt (`apt-cache show`).
Files are mapped to packages with `dpkg -S`, trying the usrmerge aliases (/lib and /usr/lib,
/lib64 and /usr/lib64) of both the path ldd prints and the file it points to.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNTIME_LIST = os.path.join(ROOT, "scripts", "packages", "runtime.txt")
ENV = dict(os.environ, LC_ALL="C")
SANITIZER_RUNTIME = re.compile(r"^lib(asan|ubsan|tsan|lsan)\.so")


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV)


def read_list(path):
    packages = []
    with open(path) as f:
        for line in f:
            packages.extend(line.split("#", 1)[0].split())
    return packages


def ldd(binary):
    """{soname: resolved path} of every library the dynamic loader maps, and the unresolved."""
    out = run("ldd", binary)
    if out.returncode != 0:
        sys.exit("ldd %s failed: %s" % (binary, out.stderr.strip()))
    resolved, missing = {}, []
    for line in out.stdout.splitlines():
        line = line.strip()
        m = re.match(r"^(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$", line)
        if m:
            if m.group(2) == "not found":
                missing.append(m.group(1))
            else:
                resolved[m.group(1)] = m.group(2)
            continue
        m = re.match(r"^(/\S+) \(0x[0-9a-f]+\)$", line)  # the dynamic loader itself
        if m:
            resolved[os.path.basename(m.group(1))] = m.group(1)
    return resolved, missing


def needed(binary):
    out = run("readelf", "-d", binary)
    if out.returncode != 0:
        sys.exit("readelf -d %s failed: %s" % (binary, out.stderr.strip()))
    names = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout))
    # The loader (PT_INTERP) is linked as surely as a NEEDED library.
    out = run("readelf", "-l", binary)
    names.update(os.path.basename(p) for p in
                 re.findall(r"\[Requesting program interpreter: ([^\]]+)\]", out.stdout))
    return names


def aliases(path):
    yield path
    for a, b in (("/usr/lib64/", "/lib64/"), ("/usr/lib/", "/lib/")):
        if path.startswith(a):
            yield b + path[len(a):]
            return
        if path.startswith(b):
            yield a + path[len(b):]
            return


def owner(path):
    """The package (without its :arch) that ships path or the file it resolves to, or None."""
    candidates = []
    for p in (path, os.path.realpath(path)):
        for alias in aliases(p):
            if alias not in candidates:
                candidates.append(alias)
    for candidate in candidates:
        out = run("dpkg", "-S", candidate)
        if out.returncode != 0:
            continue
        for line in out.stdout.splitlines():
            if line.startswith("diversion "):
                continue
            packages, sep, _ = line.partition(": ")
            if sep:
                return packages.split(", ")[0].split(":")[0]
    return None


def dependency_closure(packages):
    """The packages apt installs with the list: the list and its Depends/Pre-Depends, recursively."""
    out = run("apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
              "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *packages)
    closure = set(packages)
    for line in out.stdout.splitlines():
        m = re.match(r"^\s*\|?(?:Pre)?Depends: <?([^\s>]+)>?$", line) or re.match(r"^<?([^\s:>]+)", line)
        if m:
            closure.add(m.group(1).split(":")[0])
    return closure


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    listed = read_list(RUNTIME_LIST)
    failures = []

    shown = run("apt-cache", "show", "--no-all-versions", *listed).stdout
    known = set(re.findall(r"^Package: (\S+)$", shown, re.M))
    unknown = [p for p in listed if p not in known]
    for p in unknown:
        failures.append("runtime.txt lists %s, which apt does not know (apt-cache show %s)" % (p, p))
    if unknown and len(unknown) == len(listed):
        failures.append("apt knows none of runtime.txt's packages: run apt-get update")

    resolved, missing = ldd(binary)
    for soname in missing:
        failures.append("ldd cannot resolve %s on this machine" % soname)
    direct = needed(binary)
    closure = dependency_closure(listed)
    checked = 0
    for soname, path in sorted(resolved.items()):
        # A sanitizer build (CI tests the asan preset) links the sanitizers' runtimes, which the
        # image's release build does not: they are the build's instrumentation, not infera's.
        if SANITIZER_RUNTIME.match(soname):
            print("skip %-28s sanitizer runtime of this build" % soname)
            continue
        package = owner(path)
        checked += 1
        if package is None:
            failures.append("%s (%s): no package ships this file (dpkg -S)" % (soname, path))
        elif soname in direct and package not in listed:
            failures.append("%s (%s), linked by infera, is in package %s, which "
                            "scripts/packages/runtime.txt does not list" % (soname, path, package))
        elif package not in closure:
            failures.append("%s (%s) is in package %s, which neither scripts/packages/runtime.txt "
                            "nor any of its packages' dependencies brings" % (soname, path, package))
        else:
            print("ok  %-28s %-16s %s" % (soname, package, "linked" if soname in direct else "dependency"))

    for f in failures:
        print("FAIL " + f)
    print("%d libraries checked against %d listed packages: %d failed"
          % (checked, len(listed), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
