"""The process tree under given pids, read from /proc (tests that check nothing outlives
what they stopped)."""

import os


def descendants(pids) -> dict:
    """Every live process under ``pids`` (themselves included), by pid: its command name."""
    parent, names = {}, {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        if fields[0] != "Z":
            parent[int(name)], names[int(name)] = int(fields[1]), head.split("(", 1)[1]
    found, grew = {p for p in pids if p in names}, True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return {p: names[p] for p in found}
