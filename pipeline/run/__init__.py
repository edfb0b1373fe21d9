"""What an online and a batch run share: the run summary, the verdicts on a response, and the
commit window."""
