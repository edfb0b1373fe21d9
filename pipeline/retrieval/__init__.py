"""Your own retrieval: an index the job owns, searched lexically (and densely), and the
citations of an answer to numbered passages, constructed in the shape of Google's."""
