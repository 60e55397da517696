"""The report: one document of every verdict, its figures and tables, and the models' readings of real reviews."""
