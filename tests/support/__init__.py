"""What the tests share: jobs, databases, waiting, credentials, PostgreSQL clusters."""
