"""lit configuration: runs every .mlir test with novella-opt and the Python FileCheck."""

import os
import shutil
import sys

import lit.formats

config.name = "novella-mlir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "Inputs"]

bindir = os.path.dirname(sys.executable)
config.environment["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
for var in ("PYTHONPATH", "HOME"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

filecheck = shutil.which("filecheck", path=config.environment["PATH"])
if not filecheck:
    lit_config.fatal("the 'filecheck' command (pip package filecheck) is not installed")
config.substitutions.append(("FileCheck", filecheck))
config.substitutions.append(("novella-opt", os.path.join(bindir, "novella-opt")))
config.substitutions.append(("%python", sys.executable))
