"""MLflow as a view of the stages' outputs: the run records stages write and the step that shows them."""
