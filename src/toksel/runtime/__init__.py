"""What every stage runs on: its entry point, config, file outputs, paths, errors and process handling."""
