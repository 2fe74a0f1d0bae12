"""Running a study: the scheduler and what it needs to ask, launch, reap, adopt and reconcile
trials, the budget, transfer and adaptive batch sizes, signals and locks, progress."""
