"""Datasets: sources, tokenizers, vocabulary, the packed corpus, token frequencies and the prepared splits."""
