"""A short run of the coverage-guided fuzzer over every decoder (``fuzz/decoders.py``).

It starts from real payloads and runs a fixed number of mutated inputs through the
remote-write 1.0 (C and Python), 2.0, NDJSON and Arrow decoders: any exception but a
refusal with a message, a disagreement between the 1.0 decoders, or a crash fails it.
Longer runs: ``.venv/bin/python fuzz/decoders.py -max_total_time=600``.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).parents[3] / "fuzz" / "decoders.py"


@pytest.mark.slow
def test_the_decoders_survive_a_fuzzing_run(tmp_path):
    pytest.importorskip("atheris", reason="atheris is a dev dependency: pip install -e '.[dev]'")
    # libFuzzer reads its memory as the peak RSS (ru_maxrss), which a child inherits
    # from this process across fork and exec: its 2 GB budget is on top of ours.
    inherited_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    run = subprocess.run(
        [
            sys.executable,
            str(HARNESS),
            "-runs=4000",
            "-seed=1",
            f"-rss_limit_mb={inherited_mb + 2048}",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    crashes = sorted(p.name for p in tmp_path.iterdir())
    assert run.returncode == 0, f"{crashes}\n{run.stderr[-3000:]}"
    assert "Done 4000 runs" in run.stderr
