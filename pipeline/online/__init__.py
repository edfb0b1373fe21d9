"""One job's calls as they happen: the runner (claimer, callers, heartbeat), answering one
question, the call under the limits, the commit writer, and leases."""
