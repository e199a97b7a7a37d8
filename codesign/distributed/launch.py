"""Local multi-process launcher: ``codesign train --processes N`` on one machine.

It starts N copies of the same command line, each joining one cluster through the join flags
(``--coordinator 127.0.0.1:PORT --process-id I --num-processes N``, PORT a free port), which
call `codesign.distributed.initialize` (``jax.distributed``, gloo collectives on CPU, NCCL on
GPU). So the launcher and a hand-started cluster (one such command per host) run one code path.
Process 0 keeps this terminal's stdout and stderr and is the only one that writes results; the
others' stdout is dropped and their stderr kept in a temporary file, whose last line is reported
if they fail. When a process exits nonzero the launcher stops the others (SIGINT, then SIGKILL
after 2 s: they are blocked in collectives with the failed one; jax.distributed takes SIGTERM as a
preemption notice) and returns nonzero with one line; on Ctrl-C it interrupts them, waits up to
10 s for process 0 to say what it stored, kills the rest and returns 130.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Optional, Sequence

JOIN_FLAGS = ("--coordinator", "--process-id", "--num-processes")
"""The flags that make a command join a cluster (the launcher adds them)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def child_argv(argv: Sequence[str], coordinator: str, process_id: int, num_processes: int,
               flag: str = "--processes") -> list:
    """``argv`` (a ``codesign`` command line, without the program name) with ``flag N`` /
    ``flag=N`` removed and the join flags appended.

    Raises:
      ValueError: ``argv`` already holds a join flag.
    """
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = True
            continue
        if a.startswith(flag + "="):
            continue
        if a.split("=", 1)[0] in JOIN_FLAGS:
            raise ValueError(f"argument {flag}: not with {a.split('=', 1)[0]} (the launcher sets the join flags)")
        out.append(a)
    return out + ["--coordinator", coordinator, "--process-id", str(process_id), "--num-processes",
                  str(num_processes)]


def _child_env(env: Optional[dict]) -> dict:
    """``env`` (default: this process's) without a forced host device count in XLA_FLAGS: each
    process gets its CPU devices from ``--devices / --num-processes`` (`initialize`)."""
    env = dict(os.environ if env is None else env)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    else:
        env.pop("XLA_FLAGS", None)
    return env


def _last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _stop(procs: list, grace_s: float, sig=signal.SIGINT) -> None:
    """Sends ``sig`` to the processes still running, waits up to ``grace_s`` seconds, kills the rest."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(argv: Sequence[str], n_processes: int, *, prog: str = "codesign train", host: str = "127.0.0.1",
           env: Optional[dict] = None, poll_s: float = 0.05) -> int:
    """Runs ``python -m codesign.cli ARGV`` as ``n_processes`` processes of one cluster on
    ``host`` (module docstring) and returns the exit status: 0 when all exit 0; else the status
    of the first process that failed (1 if it died of a signal), after stopping the others;
    130 on Ctrl-C.

    Args:
      argv: the command line without the program name, holding ``--processes N`` (removed).
      n_processes: N >= 1.
      prog: the name the one-line messages start with.
      host: the coordinator's address (process 0 listens there on a free port).
      env: the children's environment (default: this process's, `_child_env`).

    Raises:
      ValueError: ``n_processes`` < 1, or ``argv`` already holds a join flag.
    """
    if isinstance(n_processes, bool) or not isinstance(n_processes, int) or n_processes < 1:
        raise ValueError(f"argument --processes: must be an int >= 1, got {n_processes!r}")
    coordinator = f"{host}:{free_port(host)}"
    cmds = [[sys.executable, "-m", "codesign.cli", *child_argv(argv, coordinator, i, n_processes)]
            for i in range(n_processes)]
    env = _child_env(env)
    print(f"{prog}: {n_processes} processes, coordinator {coordinator}", file=sys.stderr)
    procs, logs = [], []
    with tempfile.TemporaryDirectory(prefix="codesign-launch-") as tmp:
        try:
            for i, cmd in enumerate(cmds):
                if i == 0:
                    procs.append(subprocess.Popen(cmd, env=env))
                    continue
                logs.append(os.path.join(tmp, f"process{i}.err"))
                with open(logs[-1], "w") as err:
                    procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err))
            while True:
                codes = [p.poll() for p in procs]
                failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    i = failed[0]
                    # SIGINT (jax.distributed catches SIGTERM for its preemption notice), then SIGKILL
                    _stop(procs, grace_s=2.0, sig=signal.SIGINT)
                    code = codes[i]
                    why = _last_line(logs[i - 1]) if i > 0 and code > 0 else ""  # its own error line
                    status = f"status {code}" if code > 0 else f"signal {-code}"
                    print(f"{prog}: error: process {i} of {n_processes} exited with {status}"
                          f"{': ' + why if why else ''}; stopped the others", file=sys.stderr)
                    return code if code > 0 else 1
                if all(c == 0 for c in codes):
                    return 0
                time.sleep(poll_s)
        except KeyboardInterrupt:
            _stop(procs, grace_s=10.0, sig=signal.SIGINT)  # process 0 reports what it stored
            print(f"{prog}: interrupted: stopped {n_processes} processes", file=sys.stderr)
            return 130
        finally:
            _stop(procs, grace_s=2.0, sig=signal.SIGINT)
