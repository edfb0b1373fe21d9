"""The docs site's reference pages, generated from the code at build time so they cannot drift:
the job file's keys (:mod:`pipeline.job.sections`), the commands and flags (the CLI parser),
the export's fields (what ``ground export --schema`` prints), the metrics
(:mod:`pipeline.watch.metrics`) and the exit statuses (:mod:`pipeline.exit_codes`). Pure: each
page is a function returning Markdown; ``mkdocs_hooks.py`` adds them to the site."""
