"""Pure tensor/array functions: no I/O, no printing, device-agnostic."""
