"""The claims the report judges: the catalogue, how each is measured on the stages' outputs, and the verdicts."""
