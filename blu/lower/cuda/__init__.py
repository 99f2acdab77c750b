"""The GPU executable: the step runners of a launch plan on a CUDA device (kernels, cuBLASLt,
library calls, graphs) and the dispatch of eager operations on device arrays."""
