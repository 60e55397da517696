"""The paper's statements as array math: the one step, gradient flow on p, selection, the max-margin solution."""
