"""Build hook: compile the receiver's optional C extensions.

``warehouse/ingest/_v1_fast.c`` decodes remote write 1.0 (with the series already
written, ``_known_series.h``) and ``warehouse/ingest/_series_cache.c`` remembers the
series ids seen, for the new-series budget. They need
nothing beyond Python's headers and a C compiler. Without a compiler the build still
succeeds and the receiver decodes in Python (slower, same rows); set
``LLMWH_REQUIRE_EXTENSION=1`` to make a missing compiler an error instead. An
editable install builds the modules in place, next to their sources.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = (Path("warehouse/ingest/_v1_fast.c"), Path("warehouse/ingest/_series_cache.c"))


class ExtensionBuildHook(BuildHookInterface):
    """Compiles the C decoder into the package (see the module docstring)."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = []
        for source in SOURCES:
            target = (root / source).with_name(source.stem + suffix)
            try:
                compile_extension(root / source, target)
            except (OSError, subprocess.CalledProcessError) as exc:
                if os.environ.get("LLMWH_REQUIRE_EXTENSION") == "1":
                    raise
                self.app.display_warning(
                    f"{source} was not built ({exc}); the receiver will decode in Python"
                )
                return
            built.append(target)
        if version != "editable":
            for target in built:
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
