"""Compile-time models of the machine: the `Target` (hardware config + ISA limits) every
decision reads, and the analytic cost model kernels score their tiles with."""
