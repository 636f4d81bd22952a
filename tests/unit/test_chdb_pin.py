"""chdb-core is pinned exactly: the embedded server drives its internal `_chdb` module."""

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from warehouse.store.embedded import CHDB_REQUIREMENT

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_installed_chdb_core_is_the_pinned_one():
    pinned = re.search(r'"chdb-core==([\d.]+)"', PYPROJECT.read_text()).group(1)
    assert f"chdb-core=={pinned}" == CHDB_REQUIREMENT
    assert importlib.metadata.version("chdb-core") == pinned


def test_the_internal_entry_point_the_server_uses_still_exists(tmp_path):
    # In a process of its own: chdb allows one engine (one data path) per process.
    probe = (
        "import sys; from chdb import _chdb; "
        "r = _chdb.query('SELECT version()', 'TabSeparated', path=sys.argv[1]); "
        "print(bytes(r.bytes()).decode().strip())"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("26.9.")
