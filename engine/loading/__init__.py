"""The loading layer: policy files and the files they name, read within bounds and handed
to the core as text and typed values."""
