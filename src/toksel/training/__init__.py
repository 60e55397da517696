"""Training with Lightning: the modules, the data modules, fits with early stopping and resume, the protocol."""
