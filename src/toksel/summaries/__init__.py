"""What the stages write in words, below the report: Markdown tables, a claim's row, its count under the error
control, its rule's history in the ledger and the tables that set arms and variants side by side. The stages that
judge claims depend on this package, not on the report's, so that an edit of the report reruns the report alone."""
