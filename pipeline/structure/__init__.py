"""The second call: reshape a grounded answer into the job's JSON schema, then check it.

Pure functions (the only IO is :func:`load_schema` reading the schema file). Four steps, one
module each:

1. :mod:`.schema` (with :mod:`.convert`), at job load, before any call is paid for: the
   user's schema checked, kept for validation, converted to the API's subset
   (:func:`prepare_schema`, :func:`prepare_schema_file`; refusals are :class:`SchemaError`).
2. :mod:`.prompt`: the call-2 request body (:func:`build_structure_body`).
3. :mod:`.validate`: the model's JSON decoded and validated (:func:`parse_and_validate`).
4. :mod:`.provenance`: each value traced to the cited spans and sources of the grounded
   answer (:func:`trace_provenance`, :func:`provenance_to_json` for storage).

:func:`schema_hash` fingerprints a schema; it is stored with each structured object.
"""
