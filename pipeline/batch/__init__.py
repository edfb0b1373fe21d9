"""The same job through a Batch API (the Developer API's, or Vertex batch prediction over
Cloud Storage): the runner's rounds, submission, collection, the verdicts on result lines,
the budget a batch holds, and the bucket cleaned once its batches are stored."""
