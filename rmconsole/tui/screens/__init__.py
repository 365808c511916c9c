"""The pages of the TUI: runs, one run, compare, launch, and the stop confirmation."""
