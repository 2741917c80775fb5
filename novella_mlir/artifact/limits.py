"""The artifact format's limits: what the checker accepts and what the compiler may emit (the
symbolic module bounds grid indices by MAX_STEPS)."""

MAX_SYMBOLS = 8
MAX_GRID_DIMS = 8
MAX_PROGRAM = 256  # tokens of one expression
MAX_CONST = 1 << 40
MAX_STEPS = 1 << 24  # grid points of all tiles at the upper bound
MAX_SLOTS = 4  # slots of a streamed buffer, token step distances (--novella-schedule)
INPUT_DTYPES = ("float32", "int64", "int32", "int16", "int8", "uint8", "bool")
MAX_PROGRAMS = 16
