"""What a study is: its schema, composition and checks, the search space and its derived
values, the plan, the trial configs, the Optuna storage and samplers, the study's files."""
