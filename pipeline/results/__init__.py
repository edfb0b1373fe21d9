"""What a job holds, read back: status, estimate, show, cite, export and the report."""
