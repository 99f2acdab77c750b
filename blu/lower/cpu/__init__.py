"""The CPU executable: the step runners of a launch plan on numpy arrays."""
