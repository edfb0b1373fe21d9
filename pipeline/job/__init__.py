"""The job file as frozen values: the spec and its sections, the model calls it describes,
and the states a question and a source move through."""
