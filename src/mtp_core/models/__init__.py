"""Models: `load` (one loader for every kind of model) and `runs` (a paper's training runs)."""
