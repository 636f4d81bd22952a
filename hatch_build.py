"""Build hook: compile the optional C decoder of remote write 1.0 (warehouse/ingest/_v1_fast.c).

The extension has no dependency beyond Python's headers and a C compiler. Without a
compiler the build still succeeds and the receiver uses its Python decoder (slower,
same rows); set ``LLMWH_REQUIRE_EXTENSION=1`` to make a missing compiler an error
instead. An editable install builds the module in place, next to its source.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("warehouse/ingest/_v1_fast.c")


class ExtensionBuildHook(BuildHookInterface):
    """Compiles the C decoder into the package (see the module docstring)."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        target = (root / SOURCE).with_name("_v1_fast" + sysconfig.get_config_var("EXT_SUFFIX"))
        try:
            compile_extension(root / SOURCE, target)
        except (OSError, subprocess.CalledProcessError) as exc:
            if os.environ.get("LLMWH_REQUIRE_EXTENSION") == "1":
                raise
            self.app.display_warning(
                f"the C decoder was not built ({exc}); the receiver will decode in Python"
            )
            return
        if version != "editable":
            build_data["force_include"][str(target)] = str(target.relative_to(root))
            build_data["pure_python"] = False
            build_data["infer_tag"] = True


def compile_extension(source: Path, target: Path) -> None:
    """``cc`` with the interpreter's own flags, as distutils would run it."""
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    flags = shlex.split(sysconfig.get_config_var("CFLAGS") or "")
    include = sysconfig.get_paths()["include"]
    command = [
        *cc,
        *flags,
        "-O3",
        "-fPIC",
        "-shared",
        f"-I{include}",
        str(source),
        "-o",
        str(target),
    ]
    subprocess.run(command, check=True, capture_output=True)
