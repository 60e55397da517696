"""The figures the stages draw from their numbers (plots.py): apart from the report's rendering, so that editing
how the report reads reruns no stage that computes."""
