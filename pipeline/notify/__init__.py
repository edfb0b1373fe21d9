"""``[notify]``: signed webhooks. :mod:`.event` says what each event tells (pure);
:mod:`.webhook` signs and POSTs one attempt; :mod:`.outbox` writes events to the job's
database and delivers them from there, never failing the run."""
