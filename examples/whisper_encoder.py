"""The Whisper encoder on the Novella NPU, compiled once for every mel length in [2, 3000].

    .venv/bin/python examples/whisper_encoder.py [--layers 4] [--lengths 2,3,100,401,1000,2999,3000]

The demo lives in the installed package (`novella_mlir.tools.demo`, also run by
`novella demo`), so the CLI never executes a file from the working directory.
"""

import sys

from novella_mlir.tools.demo import (
    DEFAULT_LENGTHS,
    MAX_FRAMES,
    MIN_FRAMES,
    Encoder,
    build,
    compile_encoder,
    main,
    mel,
    run,
)

__all__ = ["DEFAULT_LENGTHS", "MAX_FRAMES", "MIN_FRAMES", "Encoder", "build", "compile_encoder", "main", "mel", "run"]

if __name__ == "__main__":
    sys.exit(main(prog="examples/whisper_encoder.py"))
