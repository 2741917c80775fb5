// Command-line mistakes are diagnostics located in the command line, and the
// exit code is non-zero.
// RUN: not novella-opt %s --novella-tilee 2>&1 | FileCheck %s --check-prefix=FLAG
// FLAG: <command-line>:1:{{[0-9]+}}: error: unknown command line argument '--novella-tilee'; did you mean '--novella-tile'?
// FLAG-NOT: Traceback

// RUN: not novella-opt %s --novella-tile=tile-x=3 2>&1 | FileCheck %s --check-prefix=OPTION
// OPTION: <command-line>:1:{{[0-9]+}}: error: pass 'novella-tile' has no option 'tile-x' (options: tile-m, slots)
// OPTION-NEXT: --novella-tile=tile-x=3
// OPTION-NEXT: {{^ +}}^

// RUN: not novella-opt %s --novella-tile="tile-m=big" 2>&1 | FileCheck %s --check-prefix=VALUE
// VALUE: error: option 'tile-m' of pass 'novella-tile' expects int, got 'big'

// RUN: not novella-opt %s -p 'builtin.module(novella-allocate,novella-tiles)' 2>&1 | FileCheck %s --check-prefix=PASS
// PASS: <pass-pipeline>:1:33: error: 'novella-tiles' does not refer to a registered pass or pass pipeline; did you mean 'novella-tile'?
// PASS-NEXT: builtin.module(novella-allocate,novella-tiles)
// PASS-NEXT: {{^}}                                ^

// RUN: not novella-opt %s -p 'builtin.module(novella-tile{tile-m=32 tile-n=4})' 2>&1 | FileCheck %s --check-prefix=POPT
// POPT: <pass-pipeline>:1:39: error: pass 'novella-tile' has no option 'tile-n'

// RUN: not novella-opt %s -p 'func.func(cse)' 2>&1 | FileCheck %s --check-prefix=ANCHOR
// ANCHOR: <pass-pipeline>:1:1: error: the pipeline must be anchored on 'builtin.module', not 'func.func'

// RUN: not novella-opt %s -p 'builtin.module(novella-tile' 2>&1 | FileCheck %s --check-prefix=UNBALANCED
// UNBALANCED: <pass-pipeline>:1:{{[0-9]+}}: error: expected ')' to close 'builtin.module('

// RUN: not novella-opt %s --novella-legalize -p 'builtin.module(novella-tile)' 2>&1 | FileCheck %s --check-prefix=BOTH
// BOTH: error: a pass flag cannot be combined with -p/--pass-pipeline

// RUN: not novella-opt %S/does-not-exist.mlir 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: <command-line>:1:1: error: cannot open input file '{{.*}}does-not-exist.mlir': No such file or directory

// RUN: not novella-opt %s --config %S/Inputs/bad-key.toml 2>&1 | FileCheck %s --check-prefix=KEY
// KEY: bad-key.toml:6:1: error: unknown config key 'vector.width'
// KEY-NEXT: width = 8

// RUN: not novella-opt %s --config %S/Inputs/bad-syntax.toml 2>&1 | FileCheck %s --check-prefix=TOML
// TOML: bad-syntax.toml:3:8: error: invalid TOML: Invalid value

// RUN: not novella-opt %s --config %S/Inputs/missing.toml 2>&1 | FileCheck %s --check-prefix=NOCONFIG
// NOCONFIG: <command-line>:1:{{[0-9]+}}: error: cannot read config '{{.*}}missing.toml': No such file or directory
