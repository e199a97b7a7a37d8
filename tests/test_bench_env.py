"""`codesign.bench.reexec_with_malloc_env`: measurement scripts re-run themselves once with glibc's
allocator told to keep its memory (`MALLOC_ENV`), and `deploy.measure` records the setting."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from codesign.bench import MALLOC_ENV

SCRIPT = textwrap.dedent("""
    import os, sys
    from codesign.bench import reexec_with_malloc_env
    print("start", os.environ.get("MALLOC_ARENA_MAX"), flush=True)
    reexec_with_malloc_env(__file__, sys.argv[1:])
    print("run", os.environ.get("MALLOC_ARENA_MAX"), os.environ.get("MALLOC_MMAP_MAX_"), *sys.argv[1:])
""")


def _run(tmp_path, **env):
    script = tmp_path / "measure_me.py"
    script.write_text(SCRIPT)
    base = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV and k != "CODESIGN_NO_REEXEC"}
    out = subprocess.run([sys.executable, str(script), "--flag", "x"], env={**base, **env}, capture_output=True,
                         text=True, check=True)
    return out.stdout.split("\n")


def test_a_script_reruns_itself_once_with_the_allocator_settings_and_its_arguments(tmp_path):
    lines = _run(tmp_path)
    # first process: unset; the re-run starts again (prints "start 1") and then runs with the settings
    assert lines[:3] == ["start None", "start 1", "run 1 0 --flag x"]


def test_no_rerun_when_set_or_refused(tmp_path):
    assert _run(tmp_path, **MALLOC_ENV)[:2] == ["start 1", "run 1 0 --flag x"]
    assert _run(tmp_path, CODESIGN_NO_REEXEC="1")[:2] == ["start None", "run None None --flag x"]
