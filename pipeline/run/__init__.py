"""What an online and a batch run share: the run summary, the verdicts on a response (own
retrieval's too), and the commit window."""
